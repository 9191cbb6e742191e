/* Byte planes + Huffman for KV blocks, in C with the GIL released.
 *
 * Why: the Python codec (numpy split + zstd per plane) spent most of its time in the split and
 * in zstd's match search, which finds almost nothing in an exponent plane. Huffman alone
 * (huff0 from zstd 1.5.6, vendored in _vendor/zstd) codes a plane of 2-3 bit entropy as well
 * as zstd did, several times faster, and the split fused into the same pass over each chunk
 * keeps the data in cache. The GIL is released for the whole block so the cache's I/O threads
 * encode and decode blocks in parallel.
 *
 * Decoding resolves up to four symbols per table lookup (huf_decode below): with the join
 * changes beside it, 1.45x the decode speed huff0's own decoders gave on SmolLM2 bf16 KV
 * (bench codecs, 2026-12-05); the stored format is huff0's, unchanged.
 *
 * Elements of 2 or 4 bytes are rotated left by one bit first, so that the top byte holds the
 * whole exponent of a bf16/fp32 value (sign and 7 exponent bits otherwise share a byte while
 * the last exponent bit sits with the mantissa); the same idea as ZipNN's sign-bit reorder.
 *
 * Payload ("format 2"), little-endian:
 *   u8 format (2), u8 width (1, 2 or 4), u16 0, u32 chunk elements, u64 raw bytes,
 *   then one u32 per (chunk, plane): length << 2 | method (0 raw, 1 huff0, 2 one repeated byte),
 *   then the pieces in that order.
 * A plane chunk is at most HUF_BLOCKSIZE_MAX bytes, huff0's block limit.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include "common/bitstream.h"
#include "common/cpu.h"
#include "common/huf.h"

#define FORMAT 2
#define HEADER 16
#define METHOD_RAW 0u
#define METHOD_HUF 1u
#define METHOD_RLE 2u
#define RETRY 8u

static int huf_flags(void) {
    static int flags = -1;
    if (flags < 0) {
        flags = ZSTD_cpuid_bmi2(ZSTD_cpuid()) ? HUF_flags_bmi2 : 0;
    }
    return flags;
}


/* ---- Huffman decoding, several symbols per table lookup ----
 *
 * Why: an exponent plane codes at 2-3 bits a symbol, and huff0's own decoders resolve one
 * (X1) or at most two (X2) symbols per lookup. Here a table indexed by the next tableLog bits
 * of a stream holds every whole code those bits contain, up to four symbols, so one lookup
 * and one 4-byte store decode 3-4 symbols. The input is huff0's own 4-stream format (the
 * encoder is unchanged): the table is built from huff0's single-symbol table, and the last
 * symbols of each stream are decoded one at a time as huff0 does. */

typedef struct { BYTE nbBits; BYTE byte; } X1Entry;      /* huff0's HUF_DEltX1 */
typedef struct { BYTE maxTableLog; BYTE tableType; BYTE tableLog; BYTE reserved; } X1Desc; /* its DTableDesc */
typedef struct { uint32_t symbols; BYTE count; BYTE bits; uint16_t unused; } MultiEntry;

#define MULTI_LOG 11u            /* index bits: huff0 builds its tables at 11 bits (HUF_DECODER_FAST_TABLELOG) */
#define MULTI_TABLE_SIZE ((size_t)1 << MULTI_LOG)
#define MULTI_STEPS 5              /* lookups per stream between loads: 8 + 5 * 11 bits fit in 64 */
#define MULTI_OUT (4 * MULTI_STEPS) /* bytes a stream may store in one round of lookups */
#define MULTI_IN 7                 /* bytes a stream may consume in one round (55 bits) */
#define MULTI_MIN_SYMBOLS 1024u    /* below this huff0's decoder is used as it is */
#define MULTI_MAX_BITS 5u          /* and above this many bits a symbol (fp8's ~6.6: one symbol a lookup) */
#define HUF_CORRUPT ((size_t)-1)

static void set_multi(MultiEntry *entry, uint32_t symbols, unsigned count, unsigned bits) {
    entry->symbols = symbols;
    entry->count = (BYTE)count;
    entry->bits = (BYTE)bits;
    entry->unused = 0;
}

/* Fill the 2^(log - bits) entries whose first `bits` bits decode to `count` symbols: each code
 * that still fits in the rest is appended and its run of entries filled the same way, an entry
 * where the next code does not fit ends there. Every entry is written once: O(2^log). */
static void fill_multi(const X1Entry *x1, unsigned log, MultiEntry *multi, unsigned bits, uint32_t symbols,
                       unsigned count) {
    size_t span = (size_t)1 << (log - bits), j = 0;
    if (count == 4) {
        for (; j < span; j++) set_multi(multi + j, symbols, count, bits);
        return;
    }
    while (j < span) {
        X1Entry e = x1[j << bits];
        if (e.nbBits != 0 && e.nbBits <= log - bits) {
            fill_multi(x1, log, multi + j, bits + e.nbBits, symbols | (uint32_t)e.byte << (8 * count), count + 1);
            j += (size_t)1 << (log - bits - e.nbBits);
        } else {
            set_multi(multi + j, symbols, count, bits);
            j++;
        }
    }
}

/* The last symbols of one stream, one lookup each (huff0's HUF_decodeStreamX1). */
static void finish_stream(BYTE *p, BIT_DStream_t *d, BYTE *end, const X1Entry *x1, unsigned log) {
#define X1_SYMBOL(p, d) do { const X1Entry e_ = x1[BIT_lookBitsFast((d), log)]; *(p)++ = e_.byte; \
                             BIT_skipBits((d), e_.nbBits); } while (0)
    if (end - p > 3) {
        while ((BIT_reloadDStream(d) == BIT_DStream_unfinished) & (p < end - 3)) {
            X1_SYMBOL(p, d); X1_SYMBOL(p, d); X1_SYMBOL(p, d); X1_SYMBOL(p, d);
        }
    } else {
        BIT_reloadDStream(d);
    }
    while (p < end) X1_SYMBOL(p, d);
#undef X1_SYMBOL
}

/* Decode a huff0 4-stream piece (table header included) of dst_size symbols; returns dst_size,
 * or an error code (HUF_isError) for a piece that does not decode. Small pieces, pieces of long
 * codes, other table sizes and big-endian or 32-bit hosts go to huff0's own decoder.
 *
 * The loop follows huff0's fast C loop: each stream's next bits sit at the top of a 64-bit
 * register with a 1 below the last loaded bit, so the bits consumed since the last load are
 * its trailing zeros and a reload steps the input back by whole bytes. MULTI_STEPS lookups fit
 * between loads, each storing 4 bytes and moving on by at most 4, so a run of rounds needs no
 * bounds check until a stream could reach the end of its segment or the input's start. */
static size_t huf_decode(BYTE *dst, size_t dst_size, const BYTE *src, size_t src_size, HUF_DTable *dtable,
                         MultiEntry *multi, void *wksp, size_t wksp_size) {
    size_t h, len[4], segment, n;
    const X1Entry *x1 = (const X1Entry *)(const void *)(dtable + 1);
    X1Desc desc;
    const BYTE *istart, *ilowest, *iend[4], *ip[4];
    BYTE *op[4], *seg_end[4];
    uint64_t bits[4];
    int s;

    dtable[0] = (HUF_DTable)(HUF_TABLELOG_MAX) * 0x01000001;
    if (dst_size < MULTI_MIN_SYMBOLS || src_size * 8 > dst_size * MULTI_MAX_BITS || !MEM_isLittleEndian()
        || MEM_32bits())
        return HUF_decompress4X_hufOnly_wksp(dtable, dst, dst_size, src, src_size, wksp, wksp_size, huf_flags());
    h = HUF_readDTableX1_wksp(dtable, src, src_size, wksp, wksp_size, huf_flags());
    if (HUF_isError(h)) return h;
    if (h >= src_size) return HUF_CORRUPT;
    memcpy(&desc, dtable, sizeof desc);
    if (desc.tableLog != MULTI_LOG) {  /* huff0 builds its table at 11 bits for anything it can */
        return HUF_decompress4X_usingDTable(dst, dst_size, src + h, src_size - h, dtable, huf_flags());
    }
    istart = src + h;
    src_size -= h;
    if (src_size < 6 + 4 * 8) return HUF_CORRUPT;
    len[0] = MEM_readLE16(istart);
    len[1] = MEM_readLE16(istart + 2);
    len[2] = MEM_readLE16(istart + 4);
    if (len[0] + len[1] + len[2] + 6 > src_size) return HUF_CORRUPT;
    len[3] = src_size - (len[0] + len[1] + len[2] + 6);
    if (len[0] < 8 || len[1] < 8 || len[2] < 8 || len[3] < 8)
        return HUF_decompress4X_usingDTable(dst, dst_size, istart, src_size, dtable, huf_flags());
    ilowest = istart;
    iend[0] = istart + 6;
    for (s = 1; s < 4; s++) iend[s] = iend[s - 1] + len[s - 1];
    segment = (dst_size + 3) / 4;
    for (s = 0; s < 4; s++) {
        const BYTE *last = (s < 3 ? iend[s + 1] : istart + src_size) - 8;
        BYTE top = last[7];
        ip[s] = last;
        bits[s] = (MEM_readLE64(last) | 1) << (top ? 8 - ZSTD_highbit32(top) : 0);
        op[s] = dst + (size_t)s * segment;
        seg_end[s] = s < 3 ? op[s] + segment : dst + dst_size;
    }
    fill_multi(x1, MULTI_LOG, multi, 0, 0, 0);

#define MULTI_STEP(k) do { const MultiEntry e_ = multi[bits[k] >> (64 - MULTI_LOG)]; \
                           memcpy(op[k], &e_.symbols, 4); op[k] += e_.count; bits[k] <<= e_.bits; } while (0)
#define MULTI_RELOAD(k) do { const unsigned ctz_ = (unsigned)ZSTD_countTrailingZeros64(bits[k]); \
                             ip[k] -= ctz_ >> 3; bits[k] = (MEM_read64(ip[k]) | 1) << (ctz_ & 7); } while (0)
    for (;;) {
        size_t iters = (size_t)(ip[0] - ilowest) / MULTI_IN;
        for (s = 0; s < 4; s++) {
            size_t room = (size_t)(seg_end[s] - op[s]) / MULTI_OUT;
            if (room < iters) iters = room;
            if (s > 0 && ip[s] < ip[s - 1]) iters = 0;  /* a stream read into the one before: corrupt */
        }
        if (iters == 0) break;
        for (n = 0; n < iters; n++) {  /* MULTI_STEPS rounds, unrolled by hand as huff0 does */
            MULTI_STEP(0); MULTI_STEP(1); MULTI_STEP(2); MULTI_STEP(3);
            MULTI_STEP(0); MULTI_STEP(1); MULTI_STEP(2); MULTI_STEP(3);
            MULTI_STEP(0); MULTI_STEP(1); MULTI_STEP(2); MULTI_STEP(3);
            MULTI_STEP(0); MULTI_STEP(1); MULTI_STEP(2); MULTI_STEP(3);
            MULTI_STEP(0); MULTI_STEP(1); MULTI_STEP(2); MULTI_STEP(3);
            MULTI_RELOAD(0); MULTI_RELOAD(1); MULTI_RELOAD(2); MULTI_RELOAD(3);
        }
    }
    /* the streams' segments differ in how densely they code, so when the first stream nears its
     * end the others may have hundreds of symbols left: each goes on alone, still several symbols a
     * lookup, while it has room for a round and a round's bytes above the input's start */
    for (s = 0; s < 4; s++) {
        if (s > 0 && ip[s] < ip[s - 1]) break;
        while ((seg_end[s] - op[s] >= (ptrdiff_t)MULTI_OUT) & (ip[s] - ilowest >= (ptrdiff_t)MULTI_IN)) {
            MULTI_STEP(s); MULTI_STEP(s); MULTI_STEP(s); MULTI_STEP(s); MULTI_STEP(s);
            MULTI_RELOAD(s);
        }
    }
#undef MULTI_STEP
#undef MULTI_RELOAD

    /* the last few symbols of each stream one at a time, from huff0's bit reader (its
     * HUF_initRemainingDStream: the reader may step back down to the input's start) */
    for (s = 0; s < 4; s++) {
        BIT_DStream_t d;
        if (op[s] > seg_end[s] || ip[s] + 8 < iend[s]) return HUF_CORRUPT;
        d.bitContainer = MEM_readLEST(ip[s]);
        d.bitsConsumed = (unsigned)ZSTD_countTrailingZeros64(bits[s]);
        d.start = (const char *)ilowest;
        d.limitPtr = d.start + sizeof(size_t);
        d.ptr = (const char *)ip[s];
        finish_stream(op[s], &d, seg_end[s], x1, MULTI_LOG);
        if (d.bitsConsumed > 64) return HUF_CORRUPT;
    }
    return dst_size;
}

static void put32(unsigned char *p, uint32_t v) { memcpy(p, &v, 4); }
static uint32_t get32(const unsigned char *p) { uint32_t v; memcpy(&v, p, 4); return v; }

/* Split n elements of `width` bytes into planes (plane b = byte b of each rotated element). */
static void split(const unsigned char *src, size_t n, int width, unsigned char *planes, size_t stride) {
    size_t i = 0;
    if (width == 2) {
        unsigned char *lo = planes, *hi = planes + stride;
#ifdef __SSE2__
        /* 16 elements a step: rotate, then pack the low and the high bytes (SSE2 is baseline on x86-64) */
        const __m128i mask = _mm_set1_epi16(0xff);
        for (; i + 16 <= n; i += 16) {
            __m128i a = _mm_loadu_si128((const __m128i *)(src + 2 * i));
            __m128i b = _mm_loadu_si128((const __m128i *)(src + 2 * i + 16));
            a = _mm_or_si128(_mm_slli_epi16(a, 1), _mm_srli_epi16(a, 15));
            b = _mm_or_si128(_mm_slli_epi16(b, 1), _mm_srli_epi16(b, 15));
            _mm_storeu_si128((__m128i *)(lo + i), _mm_packus_epi16(_mm_and_si128(a, mask), _mm_and_si128(b, mask)));
            _mm_storeu_si128((__m128i *)(hi + i), _mm_packus_epi16(_mm_srli_epi16(a, 8), _mm_srli_epi16(b, 8)));
        }
#endif
        for (; i < n; i++) {
            uint16_t v;
            memcpy(&v, src + 2 * i, 2);
            v = (uint16_t)((v << 1) | (v >> 15));
            lo[i] = (unsigned char)v;
            hi[i] = (unsigned char)(v >> 8);
        }
    } else if (width == 4) {
        for (i = 0; i < n; i++) {
            uint32_t v;
            memcpy(&v, src + 4 * i, 4);
            v = (v << 1) | (v >> 31);
            planes[i] = (unsigned char)v;
            planes[stride + i] = (unsigned char)(v >> 8);
            planes[2 * stride + i] = (unsigned char)(v >> 16);
            planes[3 * stride + i] = (unsigned char)(v >> 24);
        }
    } else {
        memcpy(planes, src, n);
    }
}

/* The inverse of split: planes (one pointer each: a raw plane is read where it lies in the
 * payload, not copied out first) back into rotated-back elements at dst. */
static void join(const unsigned char *const *plane, size_t n, int width, unsigned char *dst) {
    size_t i = 0;
    if (width == 2) {
        const unsigned char *lo = plane[0], *hi = plane[1];
#ifdef __SSE2__
        /* an aligned destination is written with streaming stores: a block is megabytes that the
         * engine copies out later, so reading its lines into the cache first only costs bandwidth
         * (decode_range fences them before it returns) */
        const int aligned = ((uintptr_t)dst & 15u) == 0;
        for (; i + 16 <= n; i += 16) {
            __m128i l = _mm_loadu_si128((const __m128i *)(lo + i));
            __m128i h = _mm_loadu_si128((const __m128i *)(hi + i));
            __m128i a = _mm_unpacklo_epi8(l, h), b = _mm_unpackhi_epi8(l, h);
            a = _mm_or_si128(_mm_srli_epi16(a, 1), _mm_slli_epi16(a, 15));
            b = _mm_or_si128(_mm_srli_epi16(b, 1), _mm_slli_epi16(b, 15));
            if (aligned) {
                _mm_stream_si128((__m128i *)(dst + 2 * i), a);
                _mm_stream_si128((__m128i *)(dst + 2 * i + 16), b);
            } else {
                _mm_storeu_si128((__m128i *)(dst + 2 * i), a);
                _mm_storeu_si128((__m128i *)(dst + 2 * i + 16), b);
            }
        }
#endif
        for (; i < n; i++) {
            uint16_t v = (uint16_t)(lo[i] | (hi[i] << 8));
            v = (uint16_t)((v >> 1) | (v << 15));
            memcpy(dst + 2 * i, &v, 2);
        }
    } else if (width == 4) {
        for (i = 0; i < n; i++) {
            uint32_t v = (uint32_t)plane[0][i] | ((uint32_t)plane[1][i] << 8)
                         | ((uint32_t)plane[2][i] << 16) | ((uint32_t)plane[3][i] << 24);
            v = (v >> 1) | (v << 31);
            memcpy(dst + 4 * i, &v, 4);
        }
    } else {
        memcpy(dst, plane[0], n);
    }
}

/* Encode the chunks of src into out (capacity cap) from the cursor on (*next: the next chunk to
 * code, *pos: where its pieces go; both 0 before the first call) until every chunk is coded or
 * *pos has reached stop; the cursor is moved past what was coded. The piece table at the front
 * of out is filled in as chunks are coded, so bytes before the first piece (HEADER + 4 bytes
 * per plane chunk) change until the last call; bytes after it are final once coded. Returns 0,
 * or 1 when the payload would not fit in cap (*pos is then 0); *nomem set when out of memory. */
static int encode_chunks(const unsigned char *src, size_t raw, int width, size_t chunk, double keep,
                         unsigned char *out, size_t cap, size_t stop, size_t *next, size_t *pos_io, int *nomem) {
    size_t n = raw / (size_t)width, nchunks = (n + chunk - 1) / chunk;
    size_t table = HEADER + 4 * nchunks * (size_t)width, pos = *pos_io, c = *next, k;
    unsigned char *planes = NULL;
    void *wksp = NULL;
    HUF_CElt *ctable = NULL;
    int b, flags = huf_flags() | HUF_flags_suspectUncompressible, full = 0;
    /* chunks in a row each plane was stored raw: such a plane (the mantissa bytes of bf16) is
     * tried again only every RETRY-th chunk, which saves the histogram pass over it. Read back
     * from the table, so a resumed call codes exactly what one call would. */
    unsigned raw_run[4] = {0, 0, 0, 0};

    if (table > cap) { *pos_io = 0; return 1; }
    if (c == 0) {
        pos = table;
        out[0] = FORMAT;
        out[1] = (unsigned char)width;
        out[2] = out[3] = 0;
        put32(out + 4, (uint32_t)chunk);
        {
            uint64_t r = raw;
            memcpy(out + 8, &r, 8);
        }
    }
    for (b = 0; b < width; b++)
        for (k = c; k > 0 && (get32(out + HEADER + 4 * ((k - 1) * (size_t)width + (size_t)b)) & 3u) == METHOD_RAW; k--)
            raw_run[b]++;
    planes = malloc(chunk * (size_t)width);
    wksp = malloc(HUF_WORKSPACE_SIZE);
    ctable = malloc(HUF_CTABLE_SIZE(255));
    if (planes == NULL || wksp == NULL || ctable == NULL) {
        *nomem = 1;
        goto done;
    }
    for (; c < nchunks && pos < stop; c++) {
        size_t m = (c + 1 < nchunks) ? chunk : n - c * chunk;
        split(src + c * chunk * (size_t)width, m, width, planes, chunk);
        for (b = 0; b < width; b++) {
            const unsigned char *plane = planes + (size_t)b * chunk;
            size_t want = (size_t)((double)m * keep), room = cap - pos, got = 0;
            uint32_t method = METHOD_RAW;
            if (want > room) want = room;
            if (raw_run[b] >= 2 && raw_run[b] % RETRY != 0) want = 0;
            if (want > 0) {
                HUF_repeat repeat = HUF_repeat_none;
                got = HUF_compress4X_repeat(out + pos, want, plane, m, 255, 11, wksp, HUF_WORKSPACE_SIZE,
                                            ctable, &repeat, flags);
                if (HUF_isError(got)) got = 0;
            }
            if (got == 1) {
                method = METHOD_RLE;
            } else if (got > 1) {
                method = METHOD_HUF;
            } else {
                if (m > room) { full = 1; pos = 0; goto done; }
                memcpy(out + pos, plane, m);
                got = m;
            }
            raw_run[b] = method == METHOD_RAW ? raw_run[b] + 1 : 0;
            put32(out + HEADER + 4 * (c * (size_t)width + (size_t)b), (uint32_t)(got << 2) | method);
            pos += got;
        }
    }
done:
    *next = c;
    *pos_io = pos;
    free(planes);
    free(wksp);
    free(ctable);
    return full;
}

/* Encode src into out (capacity cap) in one call; returns bytes written, 0 when it would not fit. */
static size_t encode_block(const unsigned char *src, size_t raw, int width, size_t chunk, double keep,
                           unsigned char *out, size_t cap, int *nomem) {
    size_t next = 0, pos = 0;
    if (encode_chunks(src, raw, width, chunk, keep, out, cap, SIZE_MAX, &next, &pos, nomem) || *nomem) return 0;
    return pos;
}

/* Decode the chunks of a format-2 payload of `len` bytes of which the first `avail` are present,
 * from the cursor on (*next: the next chunk to decode, *pos: where its first piece starts; both 0
 * before the first call), as far as whole chunks have arrived; the cursor is moved past them.
 * Bytes that have not arrived yet are no error while avail < len; with avail == len every chunk
 * must decode and the payload must end where the last piece does. Returns NULL on success or a
 * static message naming what is wrong. */
static const char *decode_range(const unsigned char *in, size_t avail, size_t len, unsigned char *dst, size_t raw,
                                size_t *next, size_t *pos_io) {
    size_t chunk, n, nchunks, pos, c, table;
    uint64_t stored_raw;
    int b, width;
    unsigned char *planes = NULL;
    const unsigned char *source[4];
    HUF_DTable *dtable = NULL;
    MultiEntry *multi = NULL;
    void *wksp = NULL;
    const char *err = NULL;
    const int final = avail == len;

    if (avail > len) return "more bytes than the payload holds";
    if (avail < HEADER) return final ? "header not understood" : NULL;
    if (in[0] != FORMAT || in[2] != 0 || in[3] != 0) return "header not understood";
    width = in[1];
    if (width != 1 && width != 2 && width != 4) return "element width not 1, 2 or 4";
    chunk = get32(in + 4);
    memcpy(&stored_raw, in + 8, 8);
    if (stored_raw != raw) return "raw size differs from the destination";
    if (chunk == 0 || chunk > HUF_BLOCKSIZE_MAX || raw % (size_t)width) return "chunk size not understood";
    n = raw / (size_t)width;
    nchunks = (n + chunk - 1) / chunk;
    table = HEADER + 4 * nchunks * (size_t)width;
    if (table > len) return "truncated piece table";
    if (table > avail) return final ? "truncated piece table" : NULL;
    c = *next;
    pos = c == 0 ? table : *pos_io;
    if (c > nchunks || pos < table || pos > len) return "decode cursor out of range";
    if (c == nchunks) return (final && pos != len) ? "trailing bytes after the last piece" : NULL;
    planes = malloc(chunk * (size_t)width);
    dtable = malloc(sizeof(HUF_DTable) * HUF_DTABLE_SIZE(HUF_TABLELOG_MAX));
    wksp = malloc(HUF_DECOMPRESS_WORKSPACE_SIZE);
    multi = malloc(sizeof(MultiEntry) * MULTI_TABLE_SIZE);
    if (planes == NULL || dtable == NULL || wksp == NULL || multi == NULL) { err = "out of memory"; goto done; }
    for (; c < nchunks; c++) {
        size_t m = (c + 1 < nchunks) ? chunk : n - c * chunk;
        size_t end = pos;
        /* the whole chunk must have arrived before any of its planes is decoded */
        for (b = 0; b < width; b++) {
            size_t piece = get32(in + HEADER + 4 * (c * (size_t)width + (size_t)b)) >> 2;
            if (piece > len - end) { err = "truncated piece"; goto done; }
            end += piece;
        }
        if (end > avail) break;
        for (b = 0; b < width; b++) {
            uint32_t entry = get32(in + HEADER + 4 * (c * (size_t)width + (size_t)b));
            size_t piece = entry >> 2;
            unsigned char *plane = planes + (size_t)b * chunk;
            source[b] = plane;
            switch (entry & 3u) {
            case METHOD_RAW:
                if (piece != m) { err = "raw piece of the wrong size"; goto done; }
                source[b] = in + pos;
                break;
            case METHOD_RLE:
                if (piece != 1) { err = "repeated-byte piece of the wrong size"; goto done; }
                memset(plane, in[pos], m);
                break;
            case METHOD_HUF: {
                size_t got = huf_decode(plane, m, in + pos, piece, dtable, multi, wksp, HUF_DECOMPRESS_WORKSPACE_SIZE);
                if (HUF_isError(got) || got != m) { err = "huffman piece does not decode"; goto done; }
                break;
            }
            default:
                err = "unknown piece method";
                goto done;
            }
            pos += piece;
        }
        join(source, m, width, dst + c * chunk * (size_t)width);
    }
    if (final && c == nchunks && pos != len) err = "trailing bytes after the last piece";
done:
#ifdef __SSE2__
    _mm_sfence();  /* join's streaming stores are visible before the caller reads dst */
#endif
    *next = c;
    *pos_io = pos;
    free(planes);
    free(dtable);
    free(wksp);
    free(multi);
    return err;
}

PyDoc_STRVAR(encode_doc,
"encode(raw, width, chunk, keep) -> bytes | None\n\n"
"Format-2 payload of ``raw`` (a C-contiguous buffer of ``width``-byte elements), planes cut in\n"
"chunks of ``chunk`` elements; a plane chunk is kept compressed only when at most ``keep`` of\n"
"its size. None when the payload would not be smaller than ``raw``.");

/* Parse encode's arguments; 0, or -1 with an exception set (src released). */
static int encode_args(Py_buffer *src, int width, Py_ssize_t chunk, double keep) {
    if ((width != 1 && width != 2 && width != 4) || src->len % width || chunk <= 0
        || chunk > HUF_BLOCKSIZE_MAX || keep <= 0.0 || keep > 1.0) {
        PyBuffer_Release(src);
        PyErr_SetString(PyExc_ValueError, "encode: width must be 1, 2 or 4 and divide the length; "
                                          "0 < chunk <= 131072; 0 < keep <= 1");
        return -1;
    }
    return 0;
}

/* encode_block without the GIL into out (at most cap bytes); the payload's length, 0 when it
 * would not be smaller than src, or -1 with MemoryError set. */
static Py_ssize_t run_encode(Py_buffer *src, int width, Py_ssize_t chunk, double keep, unsigned char *out,
                             size_t cap) {
    size_t got;
    int nomem = 0;
    if (cap > (size_t)src->len) cap = (size_t)src->len;  /* a payload that does not beat raw is useless */
    Py_BEGIN_ALLOW_THREADS
    got = encode_block(src->buf, (size_t)src->len, width, (size_t)chunk, keep, out, cap, &nomem);
    Py_END_ALLOW_THREADS
    if (nomem) { PyErr_NoMemory(); return -1; }
    return (got == 0 || got >= (size_t)src->len) ? 0 : (Py_ssize_t)got;
}

static PyObject *py_encode(PyObject *self, PyObject *args) {
    Py_buffer src;
    int width;
    Py_ssize_t chunk, got;
    double keep;
    PyObject *out;
    (void)self;

    if (!PyArg_ParseTuple(args, "y*ind", &src, &width, &chunk, &keep)) return NULL;
    if (encode_args(&src, width, chunk, keep) < 0) return NULL;
    out = PyBytes_FromStringAndSize(NULL, src.len);
    if (out == NULL) { PyBuffer_Release(&src); return NULL; }
    got = run_encode(&src, width, chunk, keep, (unsigned char *)PyBytes_AS_STRING(out), (size_t)src.len);
    PyBuffer_Release(&src);
    if (got <= 0) {
        Py_DECREF(out);
        if (got < 0) return NULL;
        Py_RETURN_NONE;
    }
    if (_PyBytes_Resize(&out, got) < 0) return NULL;
    return out;
}

PyDoc_STRVAR(encode_into_doc,
"encode_into(raw, width, chunk, keep, out) -> int\n\n"
"``encode`` into the writable buffer ``out`` instead of new bytes: the payload's length, 0 when\n"
"the payload would not be smaller than ``raw`` or does not fit in ``out`` (``out`` then holds\n"
"garbage). A caller that reuses ``out`` saves the allocation and its page faults per block.");

static PyObject *py_encode_into(PyObject *self, PyObject *args) {
    Py_buffer src, out;
    int width;
    Py_ssize_t chunk, got;
    double keep;
    (void)self;

    if (!PyArg_ParseTuple(args, "y*indw*", &src, &width, &chunk, &keep, &out)) return NULL;
    if (encode_args(&src, width, chunk, keep) < 0) { PyBuffer_Release(&out); return NULL; }
    got = run_encode(&src, width, chunk, keep, out.buf, (size_t)out.len);
    PyBuffer_Release(&src);
    PyBuffer_Release(&out);
    return got < 0 ? NULL : PyLong_FromSsize_t(got);
}

PyDoc_STRVAR(encode_step_doc,
"encode_step(raw, width, chunk, keep, out, next, pos, stop) -> (next, pos)\n\n"
"``encode_into`` in steps: codes chunks from the cursor (``next``, ``pos``; both 0 at first) until\n"
"all are coded or the payload has ``stop`` bytes, and returns the moved cursor. The payload is\n"
"done when ``next`` is the chunk count (``table_len`` tells both). ``pos`` 0: it would not be\n"
"smaller than ``raw`` or not fit in ``out``. Bytes from ``table_len`` on are final once coded,\n"
"so a writer can store them while later chunks are coded; the table before them is not.");

static PyObject *py_encode_step(PyObject *self, PyObject *args) {
    Py_buffer src, out;
    int width, full, nomem = 0;
    Py_ssize_t chunk, next, pos, stop;
    double keep;
    size_t c, p, cap, nchunks;
    (void)self;

    if (!PyArg_ParseTuple(args, "y*indw*nnn", &src, &width, &chunk, &keep, &out, &next, &pos, &stop)) return NULL;
    if (encode_args(&src, width, chunk, keep) < 0) { PyBuffer_Release(&out); return NULL; }
    nchunks = ((size_t)src.len / (size_t)width + (size_t)chunk - 1) / (size_t)chunk;
    if (next < 0 || (size_t)next > nchunks || pos < 0 || pos > out.len || (next > 0 && pos == 0) || stop < 0) {
        PyBuffer_Release(&src);
        PyBuffer_Release(&out);
        PyErr_SetString(PyExc_ValueError, "encode_step: cursor out of range");
        return NULL;
    }
    c = (size_t)next;
    p = (size_t)pos;
    cap = (size_t)out.len < (size_t)src.len ? (size_t)out.len : (size_t)src.len;
    if (c < nchunks) {
        Py_BEGIN_ALLOW_THREADS
        full = encode_chunks(src.buf, (size_t)src.len, width, (size_t)chunk, keep, out.buf, cap, (size_t)stop, &c,
                             &p, &nomem);
        Py_END_ALLOW_THREADS
        if (full || (c == nchunks && p >= (size_t)src.len)) p = 0;
    }
    PyBuffer_Release(&src);
    PyBuffer_Release(&out);
    if (nomem) return PyErr_NoMemory();
    return Py_BuildValue("(nn)", (Py_ssize_t)c, (Py_ssize_t)p);
}

PyDoc_STRVAR(table_len_doc,
"table_len(raw_bytes, width, chunk) -> (chunks, bytes)\n\n"
"The chunk count of a format-2 payload of ``raw_bytes`` and the length of its head (header and\n"
"piece table), which ``encode_step`` rewrites until its last call.");

static PyObject *py_table_len(PyObject *self, PyObject *args) {
    Py_ssize_t raw, chunk;
    int width;
    size_t nchunks;
    (void)self;
    if (!PyArg_ParseTuple(args, "nin", &raw, &width, &chunk)) return NULL;
    if (raw < 0 || (width != 1 && width != 2 && width != 4) || chunk <= 0) {
        PyErr_SetString(PyExc_ValueError, "table_len: raw >= 0, width 1, 2 or 4, chunk > 0");
        return NULL;
    }
    nchunks = ((size_t)raw / (size_t)width + (size_t)chunk - 1) / (size_t)chunk;
    return Py_BuildValue("(nn)", (Py_ssize_t)nchunks, (Py_ssize_t)(HEADER + 4 * nchunks * (size_t)width));
}

/* decode_range without the GIL, both buffers released after; 0, or -1 with ValueError set. */
static int run_decode(Py_buffer *in, Py_buffer *dst, size_t total, size_t *next, size_t *pos) {
    const char *err;
    Py_BEGIN_ALLOW_THREADS
    err = decode_range(in->buf, (size_t)in->len, total, dst->buf, (size_t)dst->len, next, pos);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(in);
    PyBuffer_Release(dst);
    if (err != NULL) {
        PyErr_Format(PyExc_ValueError, "lossless format 2: %s", err);
        return -1;
    }
    return 0;
}

PyDoc_STRVAR(decode_doc,
"decode(payload, dest) -> None\n\n"
"Write the raw bytes of a format-2 payload into the writable buffer ``dest`` (its exact size).\n"
"Raises ValueError for a payload that is not one.");

static PyObject *py_decode(PyObject *self, PyObject *args) {
    Py_buffer in, dst;
    size_t next = 0, pos = 0;
    (void)self;

    if (!PyArg_ParseTuple(args, "y*w*", &in, &dst)) return NULL;
    if (run_decode(&in, &dst, (size_t)in.len, &next, &pos) < 0) return NULL;
    Py_RETURN_NONE;
}

PyDoc_STRVAR(decode_prefix_doc,
"decode_prefix(prefix, dest, payload_len, next, pos) -> (next, pos)\n\n"
"Decode into ``dest`` the chunks of a format-2 payload of ``payload_len`` bytes that ``prefix``\n"
"(its first bytes, as they arrive) holds whole, from the cursor (``next`` chunk, starting at\n"
"byte ``pos``; 0, 0 at first) on, and return the cursor after them. Give the same ``dest`` and\n"
"the growing prefix of the same payload each time; once ``prefix`` is the whole payload every\n"
"chunk must decode and nothing may follow the last piece. Raises ValueError for a payload that\n"
"is not one.");

static PyObject *py_decode_prefix(PyObject *self, PyObject *args) {
    Py_buffer in, dst;
    Py_ssize_t total, next_in, pos_in;
    size_t next, pos;
    (void)self;

    if (!PyArg_ParseTuple(args, "y*w*nnn", &in, &dst, &total, &next_in, &pos_in)) return NULL;
    if (total < 0 || next_in < 0 || pos_in < 0) {
        PyBuffer_Release(&in);
        PyBuffer_Release(&dst);
        PyErr_SetString(PyExc_ValueError, "lossless format 2: negative length or cursor");
        return NULL;
    }
    next = (size_t)next_in;
    pos = (size_t)pos_in;
    if (run_decode(&in, &dst, (size_t)total, &next, &pos) < 0) return NULL;
    return Py_BuildValue("(nn)", (Py_ssize_t)next, (Py_ssize_t)pos);
}

static PyMethodDef methods[] = {
    {"encode", py_encode, METH_VARARGS, encode_doc},
    {"encode_into", py_encode_into, METH_VARARGS, encode_into_doc},
    {"encode_step", py_encode_step, METH_VARARGS, encode_step_doc},
    {"table_len", py_table_len, METH_VARARGS, table_len_doc},
    {"decode", py_decode, METH_VARARGS, decode_doc},
    {"decode_prefix", py_decode_prefix, METH_VARARGS, decode_prefix_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_planes", "Byte planes + huff0 for KV blocks (GIL released).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__planes(void) {
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    if (PyModule_AddIntConstant(m, "FORMAT", FORMAT) < 0 || PyModule_AddIntConstant(m, "MAX_CHUNK", HUF_BLOCKSIZE_MAX) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
