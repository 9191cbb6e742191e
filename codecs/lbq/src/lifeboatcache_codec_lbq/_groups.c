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
 * float16 conversions are IEEE round-to-nearest-even, as numpy's.
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

static inline uint32_t bits_of(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static inline float float_of(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

/* IEEE half to float, exact (F. Giesen's half_to_float_fast). Inline bit arithmetic, not the
 * compiler's _Float16: without F16C (not in the x86-64 baseline) each of those is a libgcc call
 * that also handles the floating-point exception flags, four per row */
static inline float half_to_float(uint16_t h) {
    uint32_t o = (uint32_t)(h & 0x7fff) << 13;
    uint32_t exp = o & (0x7c00u << 13);
    o += (uint32_t)(127 - 15) << 23;
    if (exp == (0x7c00u << 13)) {
        o += (uint32_t)(128 - 16) << 23;                     /* inf / nan */
    } else if (exp == 0) {
        o += 1u << 23;                                       /* subnormal: renormalise */
        o = bits_of(float_of(o) - float_of(113u << 23));
    }
    return float_of(o | (uint32_t)(h & 0x8000) << 16);
}

/* float to IEEE half, round-to-nearest-even, overflow to inf, NaN kept: numpy's astype(float16)
 * (F. Giesen's float_to_half_fast3_rtne) */
static inline uint16_t float_to_half(float f) {
    uint32_t u = bits_of(f);
    uint32_t sign = u & 0x80000000u;
    u ^= sign;
    uint16_t o;
    if (u >= (uint32_t)(127 + 16) << 23) {
        o = u > 0x7f800000u ? 0x7e00 : 0x7c00;               /* NaN, or beyond 65520: inf */
    } else if (u < 113u << 23) {                             /* a half subnormal (or zero) */
        const uint32_t magic = (uint32_t)((127 - 15) + (23 - 10) + 1) << 23;
        o = (uint16_t)(bits_of(float_of(u) + float_of(magic)) - magic);
    } else {
        uint32_t odd = (u >> 13) & 1;
        u += ((uint32_t)(15 - 127) << 23) + 0xfff + odd;
        o = (uint16_t)(u >> 13);
    }
    return (uint16_t)(o | sign >> 16);
}

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

/* whole runs of 8 without a bounds check (one loop per bit width: constant shifts), then the
 * zero-padded last run */
static void pack(const uint8_t *codes, Py_ssize_t count, int bits, uint8_t *out) {
    Py_ssize_t runs = count / 8, j;
    switch (bits) {
    case 2: for (j = 0; j < runs; j++) pack8(codes + 8 * j, 2, out + 2 * j); break;
    case 3: for (j = 0; j < runs; j++) pack8(codes + 8 * j, 3, out + 3 * j); break;
    default: for (j = 0; j < runs; j++) pack8(codes + 8 * j, 4, out + 4 * j); break;
    }
    if (count % 8) {
        uint8_t last[8] = {0};
        memcpy(last, codes + 8 * runs, (size_t)(count % 8));
        pack8(last, bits, out + bits * runs);
    }
}

static void unpack(const uint8_t *packed, Py_ssize_t count, int bits, uint8_t *codes) {
    Py_ssize_t runs = count / 8, j;
    switch (bits) {
    case 2: for (j = 0; j < runs; j++) unpack8(packed + 2 * j, 2, codes + 8 * j); break;
    case 3: for (j = 0; j < runs; j++) unpack8(packed + 3 * j, 3, codes + 8 * j); break;
    default: for (j = 0; j < runs; j++) unpack8(packed + 4 * j, 4, codes + 8 * j); break;
    }
    if (count % 8) {
        uint8_t last[8];
        unpack8(packed + bits * runs, bits, last);
        memcpy(codes + 8 * runs, last, (size_t)(count % 8));
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

static void quantize_rows(const float *x, Py_ssize_t n_rows, Py_ssize_t width, int bits, const float *clip,
                          Py_ssize_t n_clip, int apply_clip, uint8_t *codes, uint16_t *scale, uint16_t *zero) {
    const float top = (float)((1 << bits) - 1);
    for (Py_ssize_t r = 0; r < n_rows; r++) {
        const float *row = x + r * width;
        float lo, hi;
        row_range(row, width, &lo, &hi);
        if (apply_clip) {
            float mid = (hi + lo) * 0.5f;
            float half = (hi - lo) * (0.5f * clip[n_clip == 1 ? 0 : r]);
            lo = mid - half;
            hi = mid + half;
        }
        uint16_t z_bits = float_to_half(lo);
        float z32 = half_to_float(z_bits);
        uint16_t s_bits = float_to_half((hi - z32) / top);
        if (half_to_float(s_bits) * top < hi - z32) s_bits = next_up(s_bits);
        float s32 = half_to_float(s_bits);
        float inverse = s32 > 0.0f ? 1.0f / s32 : 0.0f;
        zero[r] = z_bits;
        scale[r] = s_bits;
        uint8_t *out = codes + r * width;
        for (Py_ssize_t i = 0; i < width; i++) {
            float v = (row[i] - z32) * inverse;
            v = v > 0.0f ? v : 0.0f;                          /* clipping before rounding: the same codes */
            v = v < top ? v : top;
            out[i] = (uint8_t)(bits_of(v + 8388608.0f) - bits_of(8388608.0f));  /* rint, for 0 <= v < 2**23 */
        }
    }
}

static void dequantize_rows(const uint8_t *codes, Py_ssize_t n_rows, Py_ssize_t width, const uint16_t *scale,
                            const uint16_t *zero, float *out) {
    for (Py_ssize_t r = 0; r < n_rows; r++) {
        float s = half_to_float(scale[r]), z = half_to_float(zero[r]);
        const uint8_t *in = codes + r * width;
        float *row = out + r * width;
        for (Py_ssize_t i = 0; i < width; i++) row[i] = (float)in[i] * s + z;
    }
}

/* rows of `width` float32 in `rows_bytes`, or -1 with a ValueError set */
static Py_ssize_t row_count(Py_ssize_t rows_bytes, Py_ssize_t width, int bits, Py_ssize_t packed_len,
                            Py_ssize_t scale_len, Py_ssize_t zero_len) {
    Py_ssize_t n_rows = width > 0 ? rows_bytes / 4 / width : 0;
    if (width <= 0 || bits < 2 || bits > 4 || rows_bytes % (4 * width) != 0 || scale_len != 2 * n_rows ||
        zero_len != 2 * n_rows || packed_len != packed_size(n_rows * width, bits)) {
        PyErr_Format(PyExc_ValueError, "lbq: %zd bytes of float32 rows of %zd at %d bits do not match %zd packed "
                     "bytes and %zd / %zd bytes of scales / zeros", rows_bytes, width, bits, packed_len, scale_len,
                     zero_len);
        return -1;
    }
    return n_rows;
}

static PyObject *quantize(PyObject *self, PyObject *args) {
    Py_buffer rows, clip, packed, scale, zero;
    Py_ssize_t width;
    int bits, apply_clip;
    if (!PyArg_ParseTuple(args, "y*niy*pw*w*w*", &rows, &width, &bits, &clip, &apply_clip, &packed, &scale, &zero))
        return NULL;
    PyObject *result = NULL;
    Py_ssize_t n_rows = row_count(rows.len, width, bits, packed.len, scale.len, zero.len);
    Py_ssize_t n_clip = clip.len / 4;
    if (n_rows >= 0 && (clip.len % 4 != 0 || (n_clip != 1 && n_clip != n_rows))) {
        PyErr_Format(PyExc_ValueError, "lbq: %zd clip values for %zd rows", n_clip, n_rows);
        n_rows = -1;
    }
    uint8_t *codes = n_rows > 0 ? malloc((size_t)(n_rows * width)) : NULL;
    if (n_rows > 0 && codes == NULL) {
        PyErr_NoMemory();
    } else if (n_rows >= 0) {
        Py_BEGIN_ALLOW_THREADS
        if (n_rows > 0) {
            quantize_rows(rows.buf, n_rows, width, bits, clip.buf, n_clip, apply_clip, codes, scale.buf, zero.buf);
            pack(codes, n_rows * width, bits, packed.buf);
        }
        Py_END_ALLOW_THREADS
        result = Py_NewRef(Py_None);
    }
    free(codes);
    PyBuffer_Release(&rows);
    PyBuffer_Release(&clip);
    PyBuffer_Release(&packed);
    PyBuffer_Release(&scale);
    PyBuffer_Release(&zero);
    return result;
}

static PyObject *dequantize(PyObject *self, PyObject *args) {
    Py_buffer packed, scale, zero, out;
    Py_ssize_t width;
    int bits;
    if (!PyArg_ParseTuple(args, "y*niy*y*w*", &packed, &width, &bits, &scale, &zero, &out)) return NULL;
    PyObject *result = NULL;
    Py_ssize_t n_rows = row_count(out.len, width, bits, packed.len, scale.len, zero.len);
    uint8_t *codes = n_rows > 0 ? malloc((size_t)(n_rows * width)) : NULL;
    if (n_rows > 0 && codes == NULL) {
        PyErr_NoMemory();
    } else if (n_rows >= 0) {
        Py_BEGIN_ALLOW_THREADS
        if (n_rows > 0) {
            unpack(packed.buf, n_rows * width, bits, codes);
            dequantize_rows(codes, n_rows, width, scale.buf, zero.buf, out.buf);
        }
        Py_END_ALLOW_THREADS
        result = Py_NewRef(Py_None);
    }
    free(codes);
    PyBuffer_Release(&packed);
    PyBuffer_Release(&scale);
    PyBuffer_Release(&zero);
    PyBuffer_Release(&out);
    return result;
}

static PyMethodDef methods[] = {
    {"quantize", quantize, METH_VARARGS,
     "quantize(rows, width, bits, clip, apply_clip, packed, scale, zero): float32 rows of `width` to packed "
     "codes and float16 scales and zeros"},
    {"dequantize", dequantize, METH_VARARGS,
     "dequantize(packed, width, bits, scale, zero, out): packed codes back to float32 rows"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_groups", "lbq row-group quantization (GIL released)",
                                    -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__groups(void) { return PyModule_Create(&module); }
