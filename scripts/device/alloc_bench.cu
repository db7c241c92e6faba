// Cost of one cudaMalloc + cudaFree pair, for the interception overhead check.
#include <cstdio>
#include <chrono>
#include <cuda_runtime.h>
int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 20000;
    void *p;
    cudaFree(0);  // create the context first
    for (int i = 0; i < 100; i++) { cudaMalloc(&p, 1 << 20); cudaFree(p); }
    auto t = std::chrono::steady_clock::now();
    for (int i = 0; i < n; i++) {
        if (cudaMalloc(&p, 1 << 20) != cudaSuccess) { printf("cudaMalloc failed\n"); return 1; }
        cudaFree(p);
    }
    double ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t).count() / n;
    printf("alloc_free_pair_ns %.0f\n", ns);
    return 0;
}
