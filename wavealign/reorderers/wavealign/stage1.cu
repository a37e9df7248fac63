// WaveAlign's Stage 1 on the GPU (paper Alg. 1); compiled by NVRTC at first use after wavealign/mask_bytes.cu, whose
// load16 the packing reads the mask with (reorderers/wavealign/stage1_cuda.py is the host side).
//
// pack_rows and transpose_bits pack a (heads, MB, NB) bool mask into 32-bit words twice, along rows and along columns,
// each row padded with zero words to a multiple of 16. Within a word, column 4m + i of its 32 sits at bit 8i + m (the
// MMA layout: lane t of a quad takes columns 4t .. 4t + 3 and 16 + 4t .. 16 + 4t + 3 as 0/1 bytes with two shifts
// and two masks). stage1_products then runs all of Alg. 1's products for every
// head in ONE persistent launch. A product multiplies the bits by a two-column block U, turned into three balanced
// base-256 digits of a 22-bit fixed-point value per column, so an int8 MMA with int32 accumulation gives the exact
// integer product. Each warp owns 16 output rows; per 32 columns (one word per row) each lane masks its bytes of the A
// fragment of `mma.sync.m16n8k32.s8` straight out of its rows' words: the bits never pass through shared memory and
// are never unpacked one by one.
//
// Each product has two phases, each followed by a grid-wide barrier:
//   digits: the blocks of each head reduce U (column maxima -> fixed-point scale, plus the centring and Cholesky-QR
//           sums) and each writes its share of U's digits, already laid out as the MMA's B fragments;
//   product: warps stream the packed rows and write the centred (and, for M^T, orthonormalised) output.
// Products alternate M^T (input Z of MB rows -> Y of NB rows) and M (Y -> Z), starting with M^T. Every reduction
// runs in a fixed order, so a plan is the same on every run.

#define WARPS 16
#define THREADS (WARPS * 32)
#define FIXED_ONE 4194304.0f  // 2^22: a column's largest magnitude maps here; three signed digits hold it
// a block that waits this long at a grid barrier traps instead of hanging: the grid was not co-resident (another
// launch of this kernel, or a partition of the GPU's SMs, took some of them)
#define BARRIER_TIMEOUT_NS 20000000000ull
#ifndef PIPE
#define PIPE 2  // chunks of 16 words per row in flight in the product phase
#endif
#ifndef DIGIT_PARTS
#define DIGIT_PARTS 0  // blocks per head in the digits phase; 0: as many as the grid has per head
#endif

__device__ __forceinline__ unsigned digit_byte(float x, int which) {
    // balanced base-256 digit `which` (0 low, 1 mid, 2 high) of trunc(x), x in [-2^22, 2^22]
    int q = __float2int_rz(x);
    int low = ((q + 128) & 255) - 128;
    if (which == 0) return (unsigned)low & 255u;
    q = (q - low) >> 8;
    int mid = ((q + 128) & 255) - 128;
    if (which == 1) return (unsigned)mid & 255u;
    return (unsigned)((q - mid) >> 8) & 255u;
}

__device__ __forceinline__ unsigned long long now_ns() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

__device__ void grid_barrier(unsigned* counter, unsigned& target) {
    // every block of the (co-resident) grid arrives once per barrier; the counter only grows
    __syncthreads();
    target += gridDim.x;
    if (threadIdx.x == 0) {
        __threadfence();
        atomicAdd(counter, 1u);
        unsigned long long start = now_ns();
        while (*((volatile unsigned*)counter) < target) {
            __nanosleep(40);
            if (now_ns() - start > BARRIER_TIMEOUT_NS) __trap();
        }
        __threadfence();
    }
    __syncthreads();
}

__device__ float block_sum(float v, float* scratch) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    __syncthreads();
    if ((threadIdx.x & 31) == 0) scratch[threadIdx.x >> 5] = v;
    __syncthreads();
    float total = 0.0f;
    for (int w = 0; w < WARPS; ++w) total += scratch[w];
    return total;
}

__device__ float block_max(float v, float* scratch) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    __syncthreads();
    if ((threadIdx.x & 31) == 0) scratch[threadIdx.x >> 5] = v;
    __syncthreads();
    float top = 0.0f;
    for (int w = 0; w < WARPS; ++w) top = fmaxf(top, scratch[w]);
    return top;
}

// digits phase of one head, part `part` of `parts` (the blocks of a head each reduce all of U, in the same order, and
// write the B fragments of their share of the 32-column steps; part 0 writes the stats): stats[0..1] the fixed-point
// factors, then for M^T the column means and the Cholesky factor (r11, r12, r22) of U^T U, for M the centring terms
// (c^T U) / MB; `frags` the B fragments per 32-column step
__device__ void digits_of_head(const float* u, const float* col_sums, int n_in, int words, int mb, bool transposed,
                               int part, int parts, float* stats, uint2* frags, float* scratch) {
    float m0 = 0.0f, m1 = 0.0f, s0 = 0.0f, s1 = 0.0f, g00 = 0.0f, g01 = 0.0f, g11 = 0.0f;
    for (int k = threadIdx.x; k < n_in; k += THREADS) {
        float2 v = __ldcg(reinterpret_cast<const float2*>(u) + k);
        m0 = fmaxf(m0, fabsf(v.x));
        m1 = fmaxf(m1, fabsf(v.y));
        if (transposed) {
            s0 += v.x; s1 += v.y; g00 += v.x * v.x; g01 += v.x * v.y; g11 += v.y * v.y;
        } else {
            float c = col_sums[k];
            s0 += c * v.x; s1 += c * v.y;
        }
    }
    m0 = block_max(m0, scratch);
    m1 = block_max(m1, scratch);
    s0 = block_sum(s0, scratch);
    s1 = block_sum(s1, scratch);
    float f0 = m0 > 0.0f ? FIXED_ONE / m0 : 0.0f;
    float f1 = m1 > 0.0f ? FIXED_ONE / m1 : 0.0f;
    if (transposed) {
        g00 = block_sum(g00, scratch);
        g01 = block_sum(g01, scratch);
        g11 = block_sum(g11, scratch);
    }
    if (part == 0 && threadIdx.x == 0) {
        float out[7] = {f0, f1, s0 / mb, s1 / mb, 1.0f, 0.0f, 1.0f};
        if (transposed) {
            float r11 = sqrtf(fmaxf(g00, 1e-30f));
            float r12 = g01 / r11;
            // relative floor: on a nearly rank-1 mask the second column's residual cancels to <= 0 in float32, and
            // an absolute floor would scale it by ~1e15 per product until the sums overflow
            out[4] = r11; out[5] = r12; out[6] = sqrtf(fmaxf(g11 - r12 * r12, fmaxf(1e-12f * g11, 1e-30f)));
        }
        for (int i = 0; i < 7; ++i) __stcg(stats + i, out[i]);
    }
    // B fragment of mma.m16n8k32 (.col): lane (g = lane / 4, t = lane % 4) holds B[4t + i][g] and B[16 + 4t + i][g],
    // i = 0..3, one byte each; B[k][n] is digit n % 3 of column n / 3 of U's row k (n = 6, 7 are zero)
    int first = words * part / parts, last = words * (part + 1) / parts;
    for (int item = first * 32 + threadIdx.x; item < last * 32; item += THREADS) {
        int step = item >> 5, lane = item & 31, n = lane >> 2, t = lane & 3;
        unsigned lo = 0u, hi = 0u;
        if (n < 6) {
            int col = n / 3, which = n % 3;
            float f = col ? f1 : f0;
            for (int i = 0; i < 4; ++i) {
                int k_lo = step * 32 + t * 4 + i, k_hi = k_lo + 16;
                float x_lo = k_lo < n_in ? __ldcg(u + 2 * k_lo + col) * f : 0.0f;
                float x_hi = k_hi < n_in ? __ldcg(u + 2 * k_hi + col) * f : 0.0f;
                lo |= digit_byte(x_lo, which) << (8 * i);
                hi |= digit_byte(x_hi, which) << (8 * i);
            }
        }
        __stcg(frags + item, make_uint2(lo, hi));
    }
}

// product phase for one warp task: 16 rows [r0, r0 + 16) of head h's packed A (rows of `words` words, a multiple
// of 16) times the digits in `frags`; lanes 4g..4g+3 hold rows r0 + g and r0 + g + 8. Each lane of a quad loads a
// different quarter of a 16-word chunk of both rows, and the quad trades words by shuffles, so a warp's loads are
// 16 rows x 64 contiguous bytes
__device__ void rows_product(const unsigned* a, const uint2* frags, const float* col_sums, const float* stats,
                             float* out, int n_out, int words, int r0, bool transposed) {
    int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3, base = lane & ~3;
    int ra = r0 + g, rb = r0 + g + 8;
    // rows past the end read the last row (valid memory) and are not stored
    const uint4* pa = reinterpret_cast<const uint4*>(a + (size_t)min(ra, n_out - 1) * words) + t;
    const uint4* pb = reinterpret_cast<const uint4*>(a + (size_t)min(rb, n_out - 1) * words) + t;
    const uint2* b = frags + lane;
    int acc[2][4] = {{0, 0, 0, 0}, {0, 0, 0, 0}};  // two chains of MMAs, even and odd steps
    // a ring of PIPE chunks of 16 words of both rows in flight: chunk c + PIPE loads while chunk c is multiplied
    int chunks = words / 16;
    uint4 qa[PIPE], qb[PIPE];
#pragma unroll
    for (int s = 0; s < PIPE; ++s)
        if (s < chunks) {
            qa[s] = __ldg(pa + 4 * s);
            qb[s] = __ldg(pb + 4 * s);
        }
    for (int c0 = 0; c0 < chunks; c0 += PIPE) {
#pragma unroll
        for (int s = 0; s < PIPE; ++s) {
            int c = c0 + s;
            if (c >= chunks) break;
            unsigned va[4] = {qa[s].x, qa[s].y, qa[s].z, qa[s].w}, vb[4] = {qb[s].x, qb[s].y, qb[s].z, qb[s].w};
            if (c + PIPE < chunks) {
                qa[s] = __ldg(pa + 4 * (c + PIPE));
                qb[s] = __ldg(pb + 4 * (c + PIPE));
            }
#pragma unroll
            for (int j = 0; j < 16; ++j) {
                uint2 frag = b[(size_t)(c * 16 + j) * 32];
                unsigned wa = __shfl_sync(0xffffffffu, va[j & 3], base + (j >> 2));
                unsigned wb = __shfl_sync(0xffffffffu, vb[j & 3], base + (j >> 2));
                // the word layout puts this lane's 4 + 4 columns at bits 8i + t and 8i + 4 + t: two masks per word
                unsigned ta = wa >> t, tb = wb >> t;
                unsigned x0 = ta & 0x01010101u, x1 = tb & 0x01010101u;
                unsigned x2 = (ta >> 4) & 0x01010101u, x3 = (tb >> 4) & 0x01010101u;
                int* d = acc[j & 1];
                asm volatile(
                    "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                    "{%0,%1,%2,%3};\n"
                    : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
                    : "r"(x0), "r"(x1), "r"(x2), "r"(x3), "r"(frag.x), "r"(frag.y));
            }
        }
    }
    int acc0 = acc[0][0] + acc[1][0], acc1 = acc[0][1] + acc[1][1];
    int acc2 = acc[0][2] + acc[1][2], acc3 = acc[0][3] + acc[1][3];
    // accumulator lane n = 2t + (0|1) of rows g (acc0, acc1) and g + 8 (acc2, acc3): lanes 0-2 are column 0's
    // digits, 3-5 column 1's; the quad's four threads trade them so each gets its rows' exact integer sums
    long long v0a = (long long)__shfl_sync(0xffffffffu, acc0, base) + 256LL * __shfl_sync(0xffffffffu, acc1, base)
                    + 65536LL * __shfl_sync(0xffffffffu, acc0, base + 1);
    long long v1a = (long long)__shfl_sync(0xffffffffu, acc1, base + 1)
                    + 256LL * __shfl_sync(0xffffffffu, acc0, base + 2)
                    + 65536LL * __shfl_sync(0xffffffffu, acc1, base + 2);
    long long v0b = (long long)__shfl_sync(0xffffffffu, acc2, base) + 256LL * __shfl_sync(0xffffffffu, acc3, base)
                    + 65536LL * __shfl_sync(0xffffffffu, acc2, base + 1);
    long long v1b = (long long)__shfl_sync(0xffffffffu, acc3, base + 1)
                    + 256LL * __shfl_sync(0xffffffffu, acc2, base + 2)
                    + 65536LL * __shfl_sync(0xffffffffu, acc3, base + 2);
    if (t > 1) return;
    int r = t == 0 ? ra : rb;
    if (r >= n_out) return;
    float f0 = __ldcg(stats), f1 = __ldcg(stats + 1);
    float o0 = f0 > 0.0f ? (float)(t == 0 ? v0a : v0b) / f0 : 0.0f;
    float o1 = f1 > 0.0f ? (float)(t == 0 ? v1a : v1b) / f1 : 0.0f;
    if (transposed) {  // Y = (M^T Z - c (1^T Z) / MB) R^-1, Z^T Z = R^T R
        float c = col_sums[r];
        o0 -= c * __ldcg(stats + 2);
        o1 -= c * __ldcg(stats + 3);
        o0 = o0 / __ldcg(stats + 4);
        o1 = (o1 - __ldcg(stats + 5) * o0) / __ldcg(stats + 6);
    } else {  // Z = M Y - 1 (c^T Y) / MB
        o0 -= __ldcg(stats + 2);
        o1 -= __ldcg(stats + 3);
    }
    __stcg(reinterpret_cast<float2*>(out) + r, make_float2(o0, o1));
}

// Alg. 1's products for every head: `products` products, alternating M^T (Z -> Y) and M (Y -> Z). Each product writes its
// B fragments to its own slice of `frags` (products x heads x 32 * max(words) uint2): an address is never rewritten
// within the launch, so those reads may be cached in L1, which is not coherent across blocks.
extern "C" __global__ void __launch_bounds__(THREADS, 1)
stage1_products(const unsigned* packed, const unsigned* packed_t, const float* col_sums, float* z, float* y,
                uint2* frags, float* stats, unsigned* counter, int heads, int mb, int nb, int words, int words_t,
                int products) {
    __shared__ float scratch[WARPS];
    unsigned target = 0;
    int warp = blockIdx.x * WARPS + (threadIdx.x >> 5), warps = gridDim.x * WARPS;
    size_t frag_stride = 32 * (size_t)max(words, words_t);
    int parts = DIGIT_PARTS > 0 ? DIGIT_PARTS : max(1, (int)gridDim.x / heads);  // blocks per head in the digits phase
    for (int p = 0; p < products; ++p) {
        bool transposed = (p % 2) == 0;
        // M^T: A = packed_t (NB rows over MB bits), Z -> Y; M: A = packed (MB rows over NB bits), Y -> Z
        const unsigned* a = transposed ? packed_t : packed;
        const float* u = transposed ? z : y;
        float* out = transposed ? y : z;
        int n_in = transposed ? mb : nb, n_out = transposed ? nb : mb, a_words = transposed ? words_t : words;
        uint2* slice = frags + (size_t)p * heads * frag_stride;
        for (int item = blockIdx.x; item < heads * parts; item += gridDim.x) {
            int h = item / parts;
            digits_of_head(u + (size_t)h * n_in * 2, col_sums + (size_t)h * nb, n_in, a_words, mb, transposed,
                           item % parts, parts, stats + 8 * h, slice + (size_t)h * frag_stride, scratch);
        }
        grid_barrier(counter, target);
        int tiles = (n_out + 15) / 16;
        for (int task = warp; task < heads * tiles; task += warps) {
            int h = task / tiles;
            rows_product(a + (size_t)h * n_out * a_words, slice + (size_t)h * frag_stride, col_sums + (size_t)h * nb,
                         stats + 8 * h, out + (size_t)h * n_out * 2, n_out, a_words, (task % tiles) * 16, transposed);
        }
        grid_barrier(counter, target);
    }
}

// ---- the bit-packing: the bool mask is read as bytes in 16-byte vectors (load16, wavealign/mask_bytes.cu)

// Row words: one warp per (row, 32 words); lane j packs columns [32 w, 32 w + 32) of its row, w = 32 * span + j,
// from three 16-byte loads (a row starts at any byte: the 32 bytes sit at the row's offset modulo 16 in them).
extern "C" __global__ void __launch_bounds__(256)
pack_rows(const unsigned char* mask, unsigned* packed, int rows, int nb, int words, int row_words, int spans) {
    long long task = (long long)blockIdx.x * 8 + (threadIdx.x >> 5);
    if (task >= (long long)rows * spans) return;
    int row = (int)(task / spans), w = (int)(task % spans) * 32 + (threadIdx.x & 31);
    if (w >= words) return;
    const unsigned char* hi = mask + (size_t)rows * nb;
    const unsigned char* first = mask + (size_t)row * nb + 32 * (size_t)w;
    const unsigned char* aligned = reinterpret_cast<const unsigned char*>(reinterpret_cast<size_t>(first) & ~(size_t)15);
    int offset = (int)(first - aligned), q = offset >> 2, shift = 8 * (offset & 3);
    uint4 v0 = load16(aligned, mask, hi), v1 = load16(aligned + 16, mask, hi), v2 = load16(aligned + 32, mask, hi);
    unsigned x[12] = {v0.x, v0.y, v0.z, v0.w, v1.x, v1.y, v1.z, v1.w, v2.x, v2.y, v2.z, v2.w};
    unsigned part[9];
#pragma unroll
    for (int i = 0; i < 9; ++i) part[i] = q == 0 ? x[i] : q == 1 ? x[i + 1] : q == 2 ? x[i + 2] : x[i + 3];
    int valid = nb - 32 * w;  // columns of the row in this word: bytes past the row's end belong to the next row
    unsigned word = 0;
#pragma unroll
    for (int m = 0; m < 8; ++m) {  // the 0/1 bytes of columns 4m .. 4m + 3 go to bits m, m + 8, m + 16, m + 24
        unsigned bytes = __funnelshift_r(part[m], part[m + 1], shift);
        if (valid < 4 * m + 4) bytes &= valid <= 4 * m ? 0u : 0xffffffffu >> (8 * (4 * m + 4 - valid));
        word |= (bytes & 0x01010101u) << m;
    }
    packed[(size_t)row * row_words + w] = word;
}

// The transpose, from the row words: one warp per 256 rows x 128 columns of one head. Lane i loads 4 words of row i
// of each of 8 row tiles; 32 ballots per word give its 32 columns' words over those 32 rows, and each lane stores
// its column's 8 tiles as two 16-byte vectors (row and column words are padded to multiples of 16), and adds their
// popcounts to the column sums c = M^T 1 (zeroed by the caller).
extern "C" __global__ void __launch_bounds__(256)
transpose_bits(const unsigned* packed, unsigned* packed_t, float* col_sums, int heads, int mb, int nb, int row_words,
               int col_words) {
    int octets = (mb + 255) / 256, quads = (nb + 127) / 128;
    long long task = (long long)blockIdx.x * 8 + (threadIdx.x >> 5);
    long long per_head = (long long)octets * quads;
    if (task >= heads * per_head) return;
    int h = (int)(task / per_head), rest = (int)(task % per_head), octet = rest / quads, quad = rest % quads;
    int lane = threadIdx.x & 31;
    unsigned out[4][8];
#pragma unroll
    for (int k = 0; k < 8; ++k) {
        int r = (octet * 8 + k) * 32 + 4 * (lane & 7) + (lane >> 3);  // the row whose bit sits at position `lane`
        uint4 v = r < mb ? __ldg(reinterpret_cast<const uint4*>(packed + ((size_t)h * mb + r) * row_words) + quad)
                         : make_uint4(0u, 0u, 0u, 0u);
        unsigned words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int m = 0; m < 4; ++m) {
#pragma unroll
            for (int j = 0; j < 32; ++j) {
                unsigned b = __ballot_sync(0xffffffffu, (words[m] >> j) & 1u);
                if (lane == j) out[m][k] = b;
            }
        }
    }
#pragma unroll
    for (int m = 0; m < 4; ++m) {
        int c = quad * 128 + m * 32 + 4 * (lane & 7) + (lane >> 3);  // the column bit `lane` of a row word holds
        if (c < nb) {
            uint4* dst = reinterpret_cast<uint4*>(packed_t + ((size_t)h * nb + c) * col_words + octet * 8);
            dst[0] = make_uint4(out[m][0], out[m][1], out[m][2], out[m][3]);
            dst[1] = make_uint4(out[m][4], out[m][5], out[m][6], out[m][7]);
            int count = 0;
#pragma unroll
            for (int k = 0; k < 8; ++k) count += __popc(out[m][k]);
            atomicAdd(col_sums + (size_t)h * nb + c, (float)count);  // whole numbers: exact in any order
        }
    }
}
