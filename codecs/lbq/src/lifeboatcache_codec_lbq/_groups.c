/* Asymmetric low-bit quantization of row groups and the dense packing of their codes, in C with
 * the GIL released.
 *
 * Why: in numpy a block took ~3 ms to encode and ~1 ms to decode (a min and a max reduction
 * along short rows, a dozen passes for scales, codes, rounding, clipping and packing), all of
 * it holding the GIL on the cache's I/O threads; here each row is read twice (its range, then
 * its codes) and the codes are packed as they are made.
 *
 * The arithmetic is that of the numpy code it replaced, operation for operation in float32
 * (no contraction into fused multiply-adds: -ffp-contract=off), so the payloads are the same
 * byte for byte (tests/codecs/test_lbq_kernel.py holds it to that numpy reference):
 *   lo, hi = min, max of the row; with clip: mid = (hi + lo) * 0.5, half = (hi - lo) * (0.5 * clip),
 *   lo, hi = mid - half, mid + half; zero = f16(lo); scale = f16((hi - zero) / L), and one f16
 *   step up where scale * L < hi - zero (the row's maximum never overflows the grid);
 *   code = clip(rint((x - zero) * (1 / scale)), 0, L) (0 where scale <= 0);
 *   decoded = code * scale + zero.
 * Codes are packed 8 to `bits` bytes, little-endian bit order, the last run zero-padded.
 * float16 conversions are IEEE round-to-nearest-even, as numpy's (the compiler's _Float16).
 *
 * quantize(rows, width, bits, clip, apply_clip, packed, scale, zero): rows float32, clip float32
 *   (one value, or one per row); packed, scale and zero are written.
 * dequantize(packed, width, bits, scale, zero, out): out float32 rows.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>

static inline uint32_t bits_of(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
/* float16 through the compiler's _Float16: IEEE round-to-nearest-even, overflow to inf, as numpy's
 * astype(float16). Without F16C (not in the x86-64 baseline) each conversion is a libgcc call; at
 * four per row the kernel is 10-15 % slower than with inline bit arithmetic, which the fp8 codec
 * has for its per-element fp16 and would be a second copy here */
static inline uint16_t float_to_half(float f) { _Float16 h = (_Float16)f; uint16_t u; memcpy(&u, &h, 2); return u; }
static inline float half_to_float(uint16_t u) { _Float16 h; memcpy(&h, &u, 2); return (float)h; }

/* numpy's nextafter(h, +inf) for float16 bits */
static inline uint16_t next_up(uint16_t b) {
    if ((b & 0x7fff) >= 0x7c00 && b != 0xfc00) return b;    /* NaN or +inf */
    if (b == 0x8000) return 0x0001;                           /* -0: the smallest positive */
    return (b & 0x8000) ? (uint16_t)(b - 1) : (uint16_t)(b + 1);
}

static Py_ssize_t packed_size(Py_ssize_t count, int bits) { return (count + 7) / 8 * bits; }

/* 8 codes to `bits` bytes, little-endian bit order */
static inline void pack8(const uint8_t *codes, int bits, uint8_t *out) {
    uint32_t word = 0;
    for (int i = 0; i < 8; i++) word |= (uint32_t)codes[i] << (bits * i);
    for (int b = 0; b < bits; b++) out[b] = (uint8_t)(word >> (8 * b));
}

static inline void unpack8(const uint8_t *packed, int bits, uint8_t *codes) {
    const uint32_t mask = (1u << bits) - 1;
    uint32_t word = 0;
    for (int b = 0; b < bits; b++) word |= (uint32_t)packed[b] << (8 * b);
    for (int i = 0; i < 8; i++) codes[i] = (uint8_t)((word >> (bits * i)) & mask);
}

/* codes to packed bytes (to_packed) or back: whole runs of 8 without a bounds check (one loop per
 * bit width: constant shifts), then the last, zero-padded run */
static void convert_runs(uint8_t *codes, Py_ssize_t count, int bits, uint8_t *packed, int to_packed) {
    Py_ssize_t runs = count / 8, j;
#define RUNS(B) for (j = 0; j < runs; j++) { \
        if (to_packed) pack8(codes + 8 * j, B, packed + (B) * j); else unpack8(packed + (B) * j, B, codes + 8 * j); }
    switch (bits) {
    case 2: RUNS(2); break;
    case 3: RUNS(3); break;
    default: RUNS(4); break;
    }
#undef RUNS
    size_t tail = (size_t)(count % 8);
    if (tail) {
        uint8_t last[8] = {0};
        if (to_packed) {
            memcpy(last, codes + 8 * runs, tail);
            pack8(last, bits, packed + bits * runs);
        } else {
            unpack8(packed + bits * runs, bits, last);
            memcpy(codes + 8 * runs, last, tail);
        }
    }
}

/* the row's min and max in 8 independent lanes (x < lo ? x : lo is one SIMD min per lane, which a
 * single running min, a reduction the compiler may not reorder without fast-math, is not) */
static inline void row_range(const float *row, Py_ssize_t width, float *lo_out, float *hi_out) {
    float lo8[8], hi8[8];
    for (int j = 0; j < 8; j++) lo8[j] = hi8[j] = row[0];
    Py_ssize_t i = 0;
    for (; i + 8 <= width; i += 8) {
        for (int j = 0; j < 8; j++) {
            float v = row[i + j];
            lo8[j] = v < lo8[j] ? v : lo8[j];
            hi8[j] = v > hi8[j] ? v : hi8[j];
        }
    }
    float lo = lo8[0], hi = hi8[0];
    for (int j = 1; j < 8; j++) {
        lo = lo8[j] < lo ? lo8[j] : lo;
        hi = hi8[j] > hi ? hi8[j] : hi;
    }
    for (; i < width; i++) {
        lo = row[i] < lo ? row[i] : lo;
        hi = row[i] > hi ? row[i] : hi;
    }
    *lo_out = lo;
    *hi_out = hi;
}

/* a row's codes on the grid `z32 + code / inverse` (inverse 0: every code 0) */
static inline void emit_codes(const float *row, Py_ssize_t width, float z32, float inverse, float top, uint8_t *out) {
    for (Py_ssize_t i = 0; i < width; i++) {
        float v = (row[i] - z32) * inverse;
        v = v > 0.0f ? v : 0.0f;                              /* clipping before rounding: the same codes */
        v = v < top ? v : top;
        out[i] = (uint8_t)(bits_of(v + 8388608.0f) - bits_of(8388608.0f));  /* rint, for 0 <= v < 2**23 */
    }
}

static inline void decode_row(const uint8_t *in, Py_ssize_t width, float s, float z, float *row) {
    for (Py_ssize_t i = 0; i < width; i++) row[i] = (float)in[i] * s + z;
}

/* the row's [lo, hi], shrunk around its midpoint by the row's clip factor when clipping */
static inline void clipped_range(const float *row, Py_ssize_t width, const float *clip, Py_ssize_t n_clip,
                                 int apply_clip, Py_ssize_t r, float *lo, float *hi) {
    row_range(row, width, lo, hi);
    if (apply_clip) {
        float mid = (*hi + *lo) * 0.5f;
        float half = (*hi - *lo) * (0.5f * clip[n_clip == 1 ? 0 : r]);
        *lo = mid - half;
        *hi = mid + half;
    }
}

static void quantize_rows(const float *x, Py_ssize_t n_rows, Py_ssize_t width, int bits, const float *clip,
                          Py_ssize_t n_clip, int apply_clip, uint8_t *codes, uint16_t *scale, uint16_t *zero) {
    const float top = (float)((1 << bits) - 1);
    for (Py_ssize_t r = 0; r < n_rows; r++) {
        const float *row = x + r * width;
        float lo, hi;
        clipped_range(row, width, clip, n_clip, apply_clip, r, &lo, &hi);
        uint16_t z_bits = float_to_half(lo);
        float z32 = half_to_float(z_bits);
        uint16_t s_bits = float_to_half((hi - z32) / top);
        if (half_to_float(s_bits) * top < hi - z32) s_bits = next_up(s_bits);
        float s32 = half_to_float(s_bits);
        zero[r] = z_bits;
        scale[r] = s_bits;
        emit_codes(row, width, z32, s32 > 0.0f ? 1.0f / s32 : 0.0f, top, codes + r * width);
    }
}

static void dequantize_rows(const uint8_t *codes, Py_ssize_t n_rows, Py_ssize_t width, const uint16_t *scale,
                            const uint16_t *zero, float *out) {
    for (Py_ssize_t r = 0; r < n_rows; r++)
        decode_row(codes + r * width, width, half_to_float(scale[r]), half_to_float(zero[r]), out + r * width);
}

/* ---- log8 rows: a row's grid in two bytes instead of a float16 scale and zero.
 *
 * A row's half-range is h(t) = 2**(t / 16) for an integer t, stored as e = t - base in a uint8 (base: one per
 * call, so that the widest row has e = 255 and 16 octaves fit below it; narrower rows are widened to h(base)),
 * and its midpoint as m * h / 32 for an int8 m in [-127, 127]. t is the smallest with h(t) >= the row's
 * half-range and >= |midpoint| * 32 / 127, so the grid [m h / 32 - h, m h / 32 + h] covers the row but for the
 * midpoint's rounding (at most h / 64: 1/43 of a 2-bit step). h(t) is a table value times a power of two (ldexpf
 * of exact float constants), never libm's exp2f, so every machine decodes the grid the encoder chose. */
static const float OCTAVE16[16] = {
    1.0f, 1.04427378f, 1.09050773f, 1.13878863f, 1.18920712f, 1.24185781f, 1.29683955f, 1.35425555f,
    1.41421356f, 1.47682615f, 1.54221083f, 1.61049033f, 1.68179283f, 1.75625216f, 1.83400809f, 1.91520656f,
};
#define LOG8_MID_UNITS 32.0f   /* the midpoint's step is h / 32 */
#define LOG8_MID_MAX 127

static inline int floor_div16(int t) { return t >= 0 ? t / 16 : -((15 - t) / 16); }
static inline float log8_half(int t) { return ldexpf(OCTAVE16[t - 16 * floor_div16(t)], floor_div16(t)); }

/* the grid (zero, step) of a row's half-range h and midpoint code m: shared by the encoder and the decoder */
static inline void log8_grid(float h, int8_t m, float top, float *z, float *step) {
    *z = (float)m * (h / LOG8_MID_UNITS) - h;
    *step = (h + h) / top;
}

/* the smallest t with h(t) >= need (need > 0, finite): need = mant * 2**(ex - 1) with 1 <= mant < 2, and the
 * first table value >= mant (exact, no libm logarithm to round) */
static int log8_exponent(float need) {
    int ex;
    float mant = frexpf(need, &ex) * 2.0f;
    int k = 0;
    while (k < 16 && OCTAVE16[k] < mant) k++;
    return 16 * (ex - 1) + k;
}

#define LOG8_FLOOR (-16 * 160)  /* h below 2**-160: a zero row (float32 values are >= 2**-149) */

/* one row at exponent t: its midpoint code and its codes */
static inline int8_t log8_row(const float *row, Py_ssize_t width, float lo, float hi, int t, float top,
                              uint8_t *codes) {
    float h = log8_half(t);
    float units = h > 0.0f ? rintf(((hi + lo) * 0.5f) / (h / LOG8_MID_UNITS)) : 0.0f;  /* h 0: rows of zeros */
    units = units < (float)LOG8_MID_MAX ? units : (float)LOG8_MID_MAX;
    units = units > (float)-LOG8_MID_MAX ? units : (float)-LOG8_MID_MAX;
    int8_t m = (int8_t)units;
    float z, step;
    log8_grid(h, m, top, &z, &step);
    float inverse = step > 0.0f ? 1.0f / step : 0.0f;  /* 0: every row of the call was zero */
    emit_codes(row, width, z, inverse, top, codes);
    return m;
}

/* returns base; exps: scratch of n_rows ints. A row's grid depends on its own t, not on base, but for rows more
 * than 16 octaves narrower than the widest: so each row is coded as it is read (once, while in cache) and only
 * those few are coded again at base once the widest is known. */
static int quantize_rows_log8(const float *x, Py_ssize_t n_rows, Py_ssize_t width, int bits, const float *clip,
                              Py_ssize_t n_clip, int apply_clip, uint8_t *codes, uint8_t *e_out, int8_t *m_out,
                              int *exps) {
    const float top = (float)((1 << bits) - 1);
    int widest = LOG8_FLOOR;
    for (Py_ssize_t r = 0; r < n_rows; r++) {
        const float *row = x + r * width;
        float lo, hi;
        clipped_range(row, width, clip, n_clip, apply_clip, r, &lo, &hi);
        float mid = (hi + lo) * 0.5f, half = (hi - lo) * 0.5f;
        float need = fabsf(mid) * (LOG8_MID_UNITS / (float)LOG8_MID_MAX);
        need = half > need ? half : need;
        exps[r] = need > 0.0f ? log8_exponent(need) : LOG8_FLOOR;
        widest = exps[r] > widest ? exps[r] : widest;
        m_out[r] = log8_row(row, width, lo, hi, exps[r], top, codes + r * width);
    }
    int base = widest - 255;
    for (Py_ssize_t r = 0; r < n_rows; r++) {
        if (exps[r] < base) {
            const float *row = x + r * width;
            float lo, hi;
            clipped_range(row, width, clip, n_clip, apply_clip, r, &lo, &hi);
            m_out[r] = log8_row(row, width, lo, hi, base, top, codes + r * width);
        }
        e_out[r] = (uint8_t)(exps[r] > base ? exps[r] - base : 0);
    }
    return base;
}

static void dequantize_rows_log8(const uint8_t *codes, Py_ssize_t n_rows, Py_ssize_t width, int bits,
                                 const uint8_t *e, const int8_t *m, int base, float *out) {
    const float top = (float)((1 << bits) - 1);
    for (Py_ssize_t r = 0; r < n_rows; r++) {
        float z, step;
        log8_grid(log8_half((int)e[r] + base), m[r], top, &z, &step);
        decode_row(codes + r * width, width, step, z, out + r * width);
    }
}

/* rows of `width` float32 in `rows_bytes`, or -1 with a ValueError set; each row's grid takes `param_bytes`
 * twice (a float16 scale and zero, or log8's e and m) */
static Py_ssize_t row_count(Py_ssize_t rows_bytes, Py_ssize_t width, int bits, Py_ssize_t packed_len,
                            Py_ssize_t scale_len, Py_ssize_t zero_len, Py_ssize_t param_bytes) {
    Py_ssize_t n_rows = width > 0 ? rows_bytes / 4 / width : 0;
    if (width <= 0 || bits < 2 || bits > 4 || rows_bytes % (4 * width) != 0 || scale_len != param_bytes * n_rows ||
        zero_len != param_bytes * n_rows || packed_len != packed_size(n_rows * width, bits)) {
        PyErr_Format(PyExc_ValueError, "lbq: %zd bytes of float32 rows of %zd at %d bits do not match %zd packed "
                     "bytes and %zd / %zd bytes of scales / zeros", rows_bytes, width, bits, packed_len, scale_len,
                     zero_len);
        return -1;
    }
    return n_rows;
}

/* one call of either direction: rows <-> (packed codes, each row's grid) */
typedef struct {
    int encode, log8;
    Py_ssize_t n_rows, width, n_clip;
    int bits, apply_clip, base;     /* base: log8's, written when encoding */
    float *rows;                    /* read when encoding, written when decoding */
    const float *clip;
    uint8_t *packed;                /* written when encoding, read when decoding */
    void *scale, *zero;             /* likewise: float16 scales and zeros, or log8's e (uint8) and m (int8) */
} Job;

/* the job through a scratch of unpacked codes, the GIL released; NULL with an error set */
static PyObject *run(Job *job) {
    if (job->n_rows == 0) return Py_NewRef(Py_None);
    Py_ssize_t count = job->n_rows * job->width;
    uint8_t *codes = malloc((size_t)count);
    int scratch = job->log8 && job->encode;
    int *exps = scratch ? malloc(sizeof(int) * (size_t)job->n_rows) : NULL;
    if (codes == NULL || (scratch && exps == NULL)) {
        free(codes);
        free(exps);
        return PyErr_NoMemory();
    }
    Py_BEGIN_ALLOW_THREADS
    if (job->encode) {
        if (job->log8)
            job->base = quantize_rows_log8(job->rows, job->n_rows, job->width, job->bits, job->clip, job->n_clip,
                                           job->apply_clip, codes, job->scale, job->zero, exps);
        else
            quantize_rows(job->rows, job->n_rows, job->width, job->bits, job->clip, job->n_clip, job->apply_clip,
                          codes, job->scale, job->zero);
        convert_runs(codes, count, job->bits, job->packed, 1);
    } else {
        convert_runs(codes, count, job->bits, job->packed, 0);
        if (job->log8)
            dequantize_rows_log8(codes, job->n_rows, job->width, job->bits, job->scale, job->zero, job->base,
                                 job->rows);
        else
            dequantize_rows(codes, job->n_rows, job->width, job->scale, job->zero, job->rows);
    }
    Py_END_ALLOW_THREADS
    free(codes);
    free(exps);
    return Py_NewRef(Py_None);
}

/* quantize / quantize_log8: the same arguments; log8's returns its base */
static PyObject *encode_call(PyObject *args, int log8) {
    Py_buffer rows, clip, packed, scale, zero;
    Job job = {.encode = 1, .log8 = log8};
    if (!PyArg_ParseTuple(args, "y*niy*pw*w*w*", &rows, &job.width, &job.bits, &clip, &job.apply_clip, &packed,
                          &scale, &zero))
        return NULL;
    PyObject *result = NULL;
    job.n_rows = row_count(rows.len, job.width, job.bits, packed.len, scale.len, zero.len, log8 ? 1 : 2);
    job.n_clip = clip.len / 4;
    if (job.n_rows >= 0 && (clip.len % 4 != 0 || (job.n_clip != 1 && job.n_clip != job.n_rows))) {
        PyErr_Format(PyExc_ValueError, "lbq: %zd clip values for %zd rows", job.n_clip, job.n_rows);
    } else if (job.n_rows >= 0) {
        job.rows = rows.buf, job.clip = clip.buf, job.packed = packed.buf, job.scale = scale.buf, job.zero = zero.buf;
        result = run(&job);
        if (result != NULL && log8) Py_SETREF(result, PyLong_FromLong(job.base));
    }
    PyBuffer_Release(&rows);
    PyBuffer_Release(&clip);
    PyBuffer_Release(&packed);
    PyBuffer_Release(&scale);
    PyBuffer_Release(&zero);
    return result;
}

static PyObject *quantize(PyObject *self, PyObject *args) { return encode_call(args, 0); }
static PyObject *quantize_log8(PyObject *self, PyObject *args) { return encode_call(args, 1); }

static PyObject *decode_call(Py_buffer *packed, Py_buffer *scale, Py_buffer *zero, Py_buffer *out, Job *job) {
    PyObject *result = NULL;
    job->n_rows = row_count(out->len, job->width, job->bits, packed->len, scale->len, zero->len, job->log8 ? 1 : 2);
    if (job->n_rows >= 0) {
        job->rows = out->buf, job->packed = packed->buf, job->scale = scale->buf, job->zero = zero->buf;
        result = run(job);
    }
    PyBuffer_Release(packed);
    PyBuffer_Release(scale);
    PyBuffer_Release(zero);
    PyBuffer_Release(out);
    return result;
}

static PyObject *dequantize(PyObject *self, PyObject *args) {
    Py_buffer packed, scale, zero, out;
    Job job = {.encode = 0};
    if (!PyArg_ParseTuple(args, "y*niy*y*w*", &packed, &job.width, &job.bits, &scale, &zero, &out)) return NULL;
    return decode_call(&packed, &scale, &zero, &out, &job);
}

static PyObject *dequantize_log8(PyObject *self, PyObject *args) {
    Py_buffer packed, e, m, out;
    Job job = {.encode = 0, .log8 = 1};
    if (!PyArg_ParseTuple(args, "y*niy*y*iw*", &packed, &job.width, &job.bits, &e, &m, &job.base, &out))
        return NULL;
    return decode_call(&packed, &e, &m, &out, &job);
}

static PyMethodDef methods[] = {
    {"quantize", quantize, METH_VARARGS,
     "quantize(rows, width, bits, clip, apply_clip, packed, scale, zero): float32 rows of `width` to packed "
     "codes and float16 scales and zeros"},
    {"dequantize", dequantize, METH_VARARGS,
     "dequantize(packed, width, bits, scale, zero, out): packed codes back to float32 rows"},
    {"quantize_log8", quantize_log8, METH_VARARGS,
     "quantize_log8(rows, width, bits, clip, apply_clip, packed, e, m) -> base: float32 rows of `width` to packed "
     "codes and each row's grid in two bytes (uint8 e, int8 m)"},
    {"dequantize_log8", dequantize_log8, METH_VARARGS,
     "dequantize_log8(packed, width, bits, e, m, base, out): packed codes back to float32 rows"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_groups", "lbq row-group quantization (GIL released)",
                                    -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__groups(void) { return PyModule_Create(&module); }
