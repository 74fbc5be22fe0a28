/* Does pool memory outlive the primary context's last release? cuda.h: the primary context
 * "is automatically reset once the last reference to it is released", and a reset "destroys
 * and cleans up all resources associated with the current device in the current process".
 * 512 MiB with cuMemAllocAsync in the primary context, its only reference released; then a
 * new retain looks (figures), and frees the pointer if it is still there (free_rc). */
#include "ask.h"

int main(void) {
    ask_open();
    use_primary();
    FN(cuCtxSetCurrent);
    FN(cuCtxSynchronize);
    FN(cuMemAllocAsync);
    FN(cuMemFreeAsync);
    FN(cuDevicePrimaryCtxRelease_v2);
    CUdeviceptr p = 0;
    report("start");
    MUST(cuMemAllocAsync(&p, 512 * MIB, NULL));
    MUST(cuCtxSynchronize());
    report("allocated");
    MUST(cuCtxSetCurrent(NULL));
    MUST(cuDevicePrimaryCtxRelease_v2(0));
    report("released"); /* no context: NVML's figure only */
    use_primary();
    report("retained_again");
    printf("free_rc=%d\n", cuMemFreeAsync(p, NULL));
    MUST(cuCtxSynchronize());
    report("freed");
    return 0;
}
