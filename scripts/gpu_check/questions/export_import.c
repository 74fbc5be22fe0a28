/* Do an exported handle and an import of it keep cuMemCreate memory alive? cuda.h on
 * cuMemRelease: memory is freed when every mapping is unmapped and every reference,
 * "including it's shareable counterparts", is released; each import "needs to pair it with
 * cuMemRelease". 512 MiB, exported as a POSIX file descriptor, imported by this process
 * (same_handle: whether the import gave the creating handle back), then released in turn. */
#include "ask.h"

int main(void) {
    ask_open();
    use_primary();
    FN(cuMemCreate);
    FN(cuMemRelease);
    FN(cuMemExportToShareableHandle);
    FN(cuMemImportFromShareableHandle);
    CUmemAllocationProp prop;
    CUmemGenericAllocationHandle h = 0, imported = 0;
    int fd = -1;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    report("start");
    MUST(cuMemCreate(&h, 512 * MIB, &prop, 0));
    report("created");
    MUST(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
    CUresult rc = cuMemImportFromShareableHandle(&imported, (void *)(intptr_t)fd,
                                                 CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    printf("import_rc=%d same_handle=%d\n", rc, rc == 0 && imported == h);
    MUST(cuMemRelease(h));
    report("released_created");
    if (rc == 0) {
        MUST(cuMemRelease(imported));
        report("released_imported");
    }
    close(fd);
    report("closed_fd");
    return 0;
}
