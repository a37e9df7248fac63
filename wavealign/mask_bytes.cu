// Reading a bool mask's bytes on the GPU in 16-byte vectors, and the row counts built on it: set entries per row,
// which skip features, Stage 2 and the kv-index form need (wavealign/blockmask.py's row_nnz); compiled by NVRTC at
// first use (wavealign/nvrtc.py). Stage 1's bit-packing (reorderers/wavealign/stage1.cu) is compiled after it and
// reads the mask through load16 too.

// The 16 bytes at `addr` (16-byte aligned, absolute), or those of them inside [lo, hi) with zeros elsewhere, read one by
// one where the vector crosses the tensor's ends (a view may start or end anywhere in its allocation).
__device__ __forceinline__ uint4 load16(const unsigned char* addr, const unsigned char* lo, const unsigned char* hi) {
    if (addr >= lo && addr + 16 <= hi) return __ldg(reinterpret_cast<const uint4*>(addr));
    unsigned w[4] = {0u, 0u, 0u, 0u};
    for (int i = 0; i < 16; ++i)
        if (addr + i >= lo && addr + i < hi) w[i >> 2] |= (unsigned)addr[i] << (8 * (i & 3));
    return make_uint4(w[0], w[1], w[2], w[3]);
}

// Set entries per row of a (rows, cols) bool matrix: one warp per row, 16-byte loads, bytes outside the row masked.
extern "C" __global__ void __launch_bounds__(256)
row_nnz(const unsigned char* mask, int* nnz, int rows, int cols) {
    long long row = (long long)blockIdx.x * 8 + (threadIdx.x >> 5);
    if (row >= rows) return;
    int lane = threadIdx.x & 31, count = 0;
    const unsigned char* hi = mask + (size_t)rows * cols;
    const unsigned char* start = mask + (size_t)row * cols;
    const unsigned char* end = start + cols;
    const unsigned char* aligned = reinterpret_cast<const unsigned char*>(reinterpret_cast<size_t>(start) & ~(size_t)15);
    for (const unsigned char* a = aligned + 16 * lane; a < end; a += 16 * 32) {
        uint4 v = load16(a, mask, hi);
        unsigned x[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            const unsigned char* b = a + 4 * k;
            unsigned keep = 0xffffffffu;  // the bytes of this word inside [start, end)
            if (b < start) keep &= b + 4 <= start ? 0u : 0xffffffffu << (8 * (int)(start - b));
            if (b + 4 > end) keep &= b >= end ? 0u : 0xffffffffu >> (8 * (int)(b + 4 - end));
            count += (int)(((x[k] & keep) * 0x01010101u) >> 24);
        }
    }
    for (int o = 16; o > 0; o >>= 1) count += __shfl_xor_sync(0xffffffffu, count, o);
    if (lane == 0) nnz[row] = count;
}
