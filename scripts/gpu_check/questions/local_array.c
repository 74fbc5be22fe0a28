/* How much does a launch of a kernel with a large local array take, and does it stay? cuda.h
 * on CU_LIMIT_STACK_SIZE: "The driver automatically increases the per-thread stack size for
 * each kernel launch as needed. This size isn't reset back to the original value after each
 * launch." A kernel with a 64 KiB `.local` array per thread (its stack frame), launched over
 * 8 blocks of 256 threads per SM (sms; resident_threads = SMs x threads per SM, what the
 * local memory is sized for), twice; then its module unloaded. stack_before / stack_after:
 * the stack limit as cuCtxGetLimit reads it. */
#include "ask.h"

typedef CUresult (*fn_cuDeviceGetAttribute)(int *value, int attribute, CUdevice dev);

#define MULTIPROCESSOR_COUNT 16           /* CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT */
#define MAX_THREADS_PER_MULTIPROCESSOR 39 /* CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_... */
#define THREADS 256

/* Each thread writes its index into its 64 KiB array at (at + tid) and reads the word at `at`
 * back; out (NULL here) would get it, so that the array is used and kept. */
static const char LOCAL_PTX[] = ".version 6.0\n"
                                ".target sm_52\n"
                                ".address_size 64\n"
                                "\n"
                                ".visible .entry big_local(.param .u64 out, .param .u32 at)\n"
                                "{\n"
                                "    .local .align 4 .b8 big[65536];\n"
                                "    .reg .pred %p<2>;\n"
                                "    .reg .b32 %r<6>;\n"
                                "    .reg .b64 %rd<7>;\n"
                                "    ld.param.u64 %rd1, [out];\n"
                                "    ld.param.u32 %r1, [at];\n"
                                "    mov.u32 %r2, %tid.x;\n"
                                "    add.u32 %r3, %r1, %r2;\n"
                                "    and.b32 %r3, %r3, 65532;\n"
                                "    and.b32 %r4, %r1, 65532;\n"
                                "    mov.u64 %rd2, big;\n"
                                "    cvt.u64.u32 %rd3, %r3;\n"
                                "    add.u64 %rd4, %rd2, %rd3;\n"
                                "    st.local.u32 [%rd4], %r2;\n"
                                "    cvt.u64.u32 %rd5, %r4;\n"
                                "    add.u64 %rd6, %rd2, %rd5;\n"
                                "    ld.local.u32 %r5, [%rd6];\n"
                                "    setp.eq.u64 %p1, %rd1, 0;\n"
                                "    @%p1 bra DONE;\n"
                                "    cvta.to.global.u64 %rd1, %rd1;\n"
                                "    st.global.u32 [%rd1], %r5;\n"
                                "DONE:\n"
                                "    ret;\n"
                                "}\n";

int main(void) {
    ask_open();
    use_primary();
    FN(cuDeviceGetAttribute);
    FN(cuCtxSynchronize);
    FN(cuLaunchKernel);
    FN(cuModuleUnload);
    int sms = 0, per_sm = 0;
    MUST(cuDeviceGetAttribute(&sms, MULTIPROCESSOR_COUNT, 0));
    MUST(cuDeviceGetAttribute(&per_sm, MAX_THREADS_PER_MULTIPROCESSOR, 0));
    unsigned long long out = 0;
    unsigned int at = 4;
    void *params[] = {&out, &at};
    unsigned int blocks = (unsigned int)(sms > 0 ? sms : 1) * 8;
    CUmodule module = NULL;
    printf("sms=%d resident_threads=%lld local_bytes_per_thread=65536 blocks=%u threads=%d\n",
           sms, (long long)sms * per_sm, blocks, THREADS);
    report("start");
    printf("stack_before=%lld\n", get_limit(CU_LIMIT_STACK_SIZE));
    CUfunction f = load_kernel(LOCAL_PTX, "big_local", &module);
    report("loaded");
    MUST(cuLaunchKernel(f, blocks, 1, 1, THREADS, 1, 1, 0, NULL, params, NULL));
    MUST(cuCtxSynchronize());
    printf("stack_after=%lld\n", get_limit(CU_LIMIT_STACK_SIZE));
    report("launched");
    MUST(cuLaunchKernel(f, blocks, 1, 1, THREADS, 1, 1, 0, NULL, params, NULL));
    MUST(cuCtxSynchronize());
    report("again");
    MUST(cuModuleUnload(module));
    report("unloaded");
    return 0;
}
