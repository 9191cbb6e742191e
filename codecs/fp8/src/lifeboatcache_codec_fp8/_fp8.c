/* fp8 quantization of KV groups with power-of-two scales, in C with the GIL released.
 *
 * Why: the numpy encoder spent 70 % of its time in ml_dtypes' float32-to-fp8 cast and made
 * five passes over the block (widen, abs, max, scale, cast); the decoder three (table lookup,
 * scale, narrow). Here each group is read twice (abs-max, then quantize) and written once,
 * from the engine's own dtype (bf16, fp16, fp32) straight to fp8 codes and back, and the
 * cache's I/O threads run it in parallel.
 *
 * The codes are those of the numpy encoder it replaced: the scale 2**e is the smallest power of
 * two with amax <= FMT_MAX * 2**e (by exact comparison, where a float log2 can be one off next
 * to a power of two), x * 2**-e is exact, and the fp8 rounding is round-to-nearest-even as in
 * ml_dtypes, subnormals included (the tests hold it to ml_dtypes code for code). A group is n contiguous elements (the caller transposes layouts whose groups are
 * not contiguous); a block is a whole number of groups.
 *
 * quantize(src, src_kind, group, fmt, exps, codes) -> bool: False where src holds NaN or Inf
 *   (outputs then undefined; the codec stores such a block raw).
 * dequantize(codes, exps, group, fmt, dst_kind, dst): codes * 2**exps into the engine's dtype,
 *   round-to-nearest-even, saturating at the dtype's largest finite value.
 * kinds: 0 bfloat16, 1 float16, 2 float32; formats: 0 e4m3 (fn: no inf), 1 e5m2.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <math.h>
#include <stdint.h>
#include <string.h>

enum { KIND_BF16 = 0, KIND_F16 = 1, KIND_F32 = 2 };

typedef struct {
    int mantissa;   /* mantissa bits */
    int bias;       /* exponent bias */
    float max;      /* largest finite value */
} Format;

static const Format FORMATS[2] = {{3, 7, 448.0f}, {2, 15, 57344.0f}};
static float decode_table[2][256];

static inline uint32_t bits_of(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static inline float float_of(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

/* IEEE half to float (exact), after F. Giesen's half_to_float_fast */
static inline float f16_to_f32(uint16_t h) {
    uint32_t o = (uint32_t)(h & 0x7fff) << 13;
    uint32_t exp = o & (0x7c00u << 13);
    o += (uint32_t)(127 - 15) << 23;
    if (exp == (0x7c00u << 13)) {
        o += (uint32_t)(128 - 16) << 23;                 /* inf / nan */
    } else if (exp == 0) {
        o += 1u << 23;                                   /* subnormal: renormalise */
        o = bits_of(float_of(o) - float_of(113u << 23));
    }
    return float_of(o | (uint32_t)(h & 0x8000) << 16);
}

/* finite float to half, round-to-nearest-even, saturating (after float_to_half_fast3_rtne) */
static inline uint16_t f32_to_f16(float f) {
    uint32_t u = bits_of(f);
    uint32_t sign = u & 0x80000000u;
    u ^= sign;
    uint16_t o;
    if (u >= (uint32_t)(127 + 16) << 23) {
        o = 0x7bff;                                      /* beyond 65520: the largest finite half */
    } else if (u < 113u << 23) {
        const uint32_t magic = (uint32_t)((127 - 15) + (23 - 10) + 1) << 23;
        o = (uint16_t)(bits_of(float_of(u) + float_of(magic)) - magic);
    } else {
        uint32_t odd = (u >> 13) & 1;
        u += ((uint32_t)(15 - 127) << 23) + 0xfff + odd;
        o = (uint16_t)(u >> 13);
        if (o > 0x7bff) o = 0x7bff;                      /* rounded up to inf */
    }
    return (uint16_t)(o | sign >> 16);
}

/* finite float to bfloat16, round-to-nearest-even, saturating */
static inline uint16_t f32_to_bf16(float f) {
    uint32_t u = bits_of(f);
    uint32_t r = (u + 0x7fffu + ((u >> 16) & 1)) >> 16;
    if ((r & 0x7f80) == 0x7f80) r = (r & 0x8000) | 0x7f7f;
    return (uint16_t)r;
}

static inline float load(const void *src, int kind, Py_ssize_t i) {
    if (kind == KIND_BF16) return float_of((uint32_t)((const uint16_t *)src)[i] << 16);
    if (kind == KIND_F16) return f16_to_f32(((const uint16_t *)src)[i]);
    return ((const float *)src)[i];
}

/* a finite |value| <= the format's max to its fp8 code, round-to-nearest-even. Both roundings are
 * computed and one is selected (no branch), so the quantize loop vectorises. */
static inline uint8_t to_fp8(float v, int m, int bias, float sub_scale) {
    uint32_t u = bits_of(v);
    uint32_t sign = (u >> 24) & 0x80;
    u &= 0x7fffffffu;
    int shift = 23 - m;                                  /* a normal number of the format: drop bits, RNE */
    uint32_t r = u + ((1u << (shift - 1)) - 1) + ((u >> shift) & 1);
    uint32_t normal = (r >> shift) - ((uint32_t)(127 - bias) << m);
    /* subnormal: rint(|v| / 2**(1-bias-m)), by the FPU's own round-to-nearest-even */
    uint32_t subnormal = bits_of(float_of(u) * sub_scale + 8388608.0f) - bits_of(8388608.0f);
    uint32_t is_normal = 0u - (uint32_t)(u >= (uint32_t)(128 - bias) << 23);
    uint32_t code = (normal & is_normal) | (subnormal & ~is_normal);
    return (uint8_t)(sign | code);
}

/* the smallest e in [-126, 127] with amax <= max * 2**e (0 for an all-zero group): exact, where a
 * float log2 of amax / max can be one off next to a power of two */
static inline int scale_exponent(float amax, float max) {
    if (amax == 0.0f) return 0;
    int e;
    frexpf(amax / max, &e);                              /* amax / max in [2**(e-1), 2**e), up to rounding */
    e -= 2;                                              /* below the answer whichever way the division rounded */
    while (e < 127 && amax > ldexpf(max, e)) e++;
    return e < -126 ? -126 : e;
}

#define ALWAYS_INLINE static inline __attribute__((always_inline))

/* |x| as the bits of the source dtype: non-negative floats order as their bit patterns do, so the
 * group's abs-max is an integer max (which compilers vectorise, where a float max with NaN rules
 * they do not), and NaN or Inf is any bit pattern at or above the dtype's infinity */
ALWAYS_INLINE uint32_t abs_bits(const void *src, int kind, Py_ssize_t i) {
    if (kind == KIND_F32) return ((const uint32_t *)src)[i] & 0x7fffffffu;
    return ((const uint16_t *)src)[i] & 0x7fffu;
}

ALWAYS_INLINE float float_of_abs_bits(uint32_t bits, int kind) {
    if (kind == KIND_BF16) return float_of(bits << 16);
    if (kind == KIND_F16) return f16_to_f32((uint16_t)bits);
    return float_of(bits);
}

/* one source kind at a time (kind is a constant where it is inlined: one loop per kind) */
ALWAYS_INLINE int quantize_kind(const void *src, int kind, Py_ssize_t groups, Py_ssize_t n, const Format *fmt,
                                int8_t *exps, uint8_t *codes) {
    const float sub_scale = ldexpf(1.0f, fmt->bias - 1 + fmt->mantissa);
    const uint32_t infinity = kind == KIND_BF16 ? 0x7f80u : kind == KIND_F16 ? 0x7c00u : 0x7f800000u;
    for (Py_ssize_t g = 0; g < groups; g++) {
        Py_ssize_t base = g * n;
        uint32_t max_bits = 0;
        for (Py_ssize_t i = 0; i < n; i++) {
            uint32_t a = abs_bits(src, kind, base + i);
            max_bits = a > max_bits ? a : max_bits;
        }
        if (max_bits >= infinity) return 0;
        int e = scale_exponent(float_of_abs_bits(max_bits, kind), fmt->max);
        exps[g] = (int8_t)e;
        float inv = ldexpf(1.0f, -e);
        for (Py_ssize_t i = 0; i < n; i++) {
            codes[base + i] = to_fp8(load(src, kind, base + i) * inv, fmt->mantissa, fmt->bias, sub_scale);
        }
    }
    return 1;
}

/* one loop per (kind, format): both constant where quantize_kind is inlined */
static int quantize_groups(const void *src, int kind, Py_ssize_t groups, Py_ssize_t n, int fmt,
                           int8_t *exps, uint8_t *codes) {
#define QUANTIZE(K, F) if (kind == K && fmt == F) return quantize_kind(src, K, groups, n, &FORMATS[F], exps, codes)
    QUANTIZE(KIND_BF16, 0); QUANTIZE(KIND_BF16, 1);
    QUANTIZE(KIND_F16, 0); QUANTIZE(KIND_F16, 1);
    QUANTIZE(KIND_F32, 0);
    return quantize_kind(src, KIND_F32, groups, n, &FORMATS[1], exps, codes);
#undef QUANTIZE
}

static void dequantize_groups(const uint8_t *codes, const int8_t *exps, Py_ssize_t groups, Py_ssize_t n,
                              const float *table, int kind, void *dst) {
    for (Py_ssize_t g = 0; g < groups; g++) {
        Py_ssize_t base = g * n;
        float scale = ldexpf(1.0f, exps[g]);
        if (kind == KIND_BF16) {
            uint16_t *out = (uint16_t *)dst + base;
            for (Py_ssize_t i = 0; i < n; i++) out[i] = f32_to_bf16(table[codes[base + i]] * scale);
        } else if (kind == KIND_F16) {
            uint16_t *out = (uint16_t *)dst + base;
            for (Py_ssize_t i = 0; i < n; i++) out[i] = f32_to_f16(table[codes[base + i]] * scale);
        } else {
            float *out = (float *)dst + base;
            for (Py_ssize_t i = 0; i < n; i++) out[i] = table[codes[base + i]] * scale;
        }
    }
}

/* the group count of `count` elements of `kind` in groups of `n`, or -1 with a ValueError set */
static Py_ssize_t group_count(int kind, int fmt, Py_ssize_t bytes, Py_ssize_t n, Py_ssize_t exps_len,
                              Py_ssize_t codes_len) {
    Py_ssize_t width = kind == KIND_F32 ? 4 : 2;
    Py_ssize_t count = bytes / width;
    if (kind < KIND_BF16 || kind > KIND_F32 || fmt < 0 || fmt > 1 || n <= 0 || bytes % width != 0 ||
        count % n != 0 || codes_len != count || exps_len != count / n) {
        PyErr_Format(PyExc_ValueError, "fp8: %zd bytes of kind %d in groups of %zd elements do not match %zd codes"
                     " and %zd scales (format %d)", bytes, kind, n, codes_len, exps_len, fmt);
        return -1;
    }
    return count / n;
}

/* quantize (encode) or dequantize: `in` is the source block or the codes, `out` the codes or the
 * destination block; `exps` is written when encoding and read when decoding */
static PyObject *transcode(PyObject *args, int encode) {
    Py_buffer in, exps, out;
    int kind, fmt;
    Py_ssize_t n;
    if (encode ? !PyArg_ParseTuple(args, "y*iniw*w*", &in, &kind, &n, &fmt, &exps, &out)
               : !PyArg_ParseTuple(args, "y*y*niiw*", &in, &exps, &n, &fmt, &kind, &out))
        return NULL;
    PyObject *result = NULL;
    Py_ssize_t groups = group_count(kind, fmt, encode ? in.len : out.len, n, exps.len, encode ? out.len : in.len);
    if (groups >= 0) {
        int finite = 1;
        Py_BEGIN_ALLOW_THREADS
        if (encode) {
            finite = quantize_groups(in.buf, kind, groups, n, fmt, exps.buf, out.buf);
        } else {
            dequantize_groups(in.buf, exps.buf, groups, n, decode_table[fmt], kind, out.buf);
        }
        Py_END_ALLOW_THREADS
        result = encode ? PyBool_FromLong(finite) : Py_NewRef(Py_None);
    }
    PyBuffer_Release(&in);
    PyBuffer_Release(&exps);
    PyBuffer_Release(&out);
    return result;
}

static PyObject *quantize(PyObject *self, PyObject *args) { return transcode(args, 1); }

static PyObject *dequantize(PyObject *self, PyObject *args) { return transcode(args, 0); }

/* the float value of each code (NaN for e4m3fn's 0x7f/0xff, inf/nan for e5m2's top exponent) */
static void build_tables(void) {
    for (int f = 0; f < 2; f++) {
        int m = FORMATS[f].mantissa, bias = FORMATS[f].bias, top = (1 << (7 - m)) - 1;
        for (int c = 0; c < 256; c++) {
            int exp = (c >> m) & top, man = c & ((1 << m) - 1);
            float v;
            if (exp == 0) {
                v = ldexpf((float)man, 1 - bias - m);
            } else if (f == 0 && exp == top && man == (1 << m) - 1) {
                v = NAN;
            } else if (f == 1 && exp == top) {
                v = man ? NAN : INFINITY;
            } else {
                v = ldexpf(1.0f + (float)man / (float)(1 << m), exp - bias);
            }
            decode_table[f][c] = c & 0x80 ? -v : v;
        }
    }
}

static PyMethodDef methods[] = {
    {"quantize", quantize, METH_VARARGS,
     "quantize(src, src_kind, group, fmt, exps, codes) -> bool: fp8 codes and scale exponents of each group "
     "of `group` contiguous elements; False if src holds NaN or Inf"},
    {"dequantize", dequantize, METH_VARARGS,
     "dequantize(codes, exps, group, fmt, dst_kind, dst): codes * 2**exps into dst's dtype"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_fp8", "fp8 KV quantization (GIL released)", -1,
                                    methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__fp8(void) {
    build_tables();
    return PyModule_Create(&module);
}
