/* Is the device malloc heap taken when cuCtxSetLimit(CU_LIMIT_MALLOC_HEAP_SIZE) is called, or
 * at the first kernel launch? cuda.h says only that the limit "must be performed before
 * launching any kernel that uses the ::malloc() or ::free() device system calls". The heap
 * is set to 256 MiB (heap_before / heap_after: the limit as cuCtxGetLimit reads it); then a
 * kernel that does nothing is loaded from PTX and launched once; then one whose threads call
 * malloc and free (heap_load_rc: whether the driver links that PTX; launch_rc its launch). */
#include "ask.h"

#define HEAP (256 * MIB)

/* A kernel that does nothing. */
static const char NOOP_PTX[] = ".version 6.0\n"
                               ".target sm_52\n"
                               ".address_size 64\n"
                               "\n"
                               ".visible .entry noop()\n"
                               "{\n"
                               "    ret;\n"
                               "}\n";

/* Each thread takes 64 bytes from the heap and gives them back. */
static const char HEAP_PTX[] = ".version 6.0\n"
                               ".target sm_52\n"
                               ".address_size 64\n"
                               "\n"
                               ".extern .func (.param .b64 func_retval0) malloc\n"
                               "(\n"
                               "    .param .b64 malloc_param_0\n"
                               ");\n"
                               ".extern .func free\n"
                               "(\n"
                               "    .param .b64 free_param_0\n"
                               ");\n"
                               "\n"
                               ".visible .entry heap()\n"
                               "{\n"
                               "    .reg .b64 %rd<3>;\n"
                               "    mov.u64 %rd1, 64;\n"
                               "    {\n"
                               "    .param .b64 param0;\n"
                               "    st.param.b64 [param0+0], %rd1;\n"
                               "    .param .b64 retval0;\n"
                               "    call.uni (retval0), malloc, (param0);\n"
                               "    ld.param.b64 %rd2, [retval0+0];\n"
                               "    }\n"
                               "    {\n"
                               "    .param .b64 param0;\n"
                               "    st.param.b64 [param0+0], %rd2;\n"
                               "    call.uni free, (param0);\n"
                               "    }\n"
                               "    ret;\n"
                               "}\n";

int main(void) {
    ask_open();
    use_primary();
    FN(cuCtxSetLimit);
    FN(cuCtxSynchronize);
    FN(cuLaunchKernel);
    FN(cuModuleLoadData);
    FN(cuModuleGetFunction);
    FN(cuModuleUnload);
    CUmodule noop_module = NULL, heap_module = NULL;
    report("start");
    printf("heap_before=%lld\n", get_limit(CU_LIMIT_MALLOC_HEAP_SIZE));
    MUST(cuCtxSetLimit(CU_LIMIT_MALLOC_HEAP_SIZE, HEAP));
    printf("heap_after=%lld\n", get_limit(CU_LIMIT_MALLOC_HEAP_SIZE));
    report("limit_set");
    CUfunction noop = load_kernel(NOOP_PTX, "noop", &noop_module);
    report("loaded");
    MUST(cuLaunchKernel(noop, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL));
    MUST(cuCtxSynchronize());
    report("launched");
    CUresult rc = cuModuleLoadData(&heap_module, HEAP_PTX);
    printf("heap_load_rc=%d\n", rc);
    if (rc == 0) {
        CUfunction heap = NULL;
        MUST(cuModuleGetFunction(&heap, heap_module, "heap"));
        rc = cuLaunchKernel(heap, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL);
        printf("launch_rc=%d sync_rc=%d\n", rc, cuCtxSynchronize());
        report("heap_launched");
        MUST(cuModuleUnload(heap_module));
    }
    MUST(cuModuleUnload(noop_module));
    report("unloaded");
    return 0;
}
