/* Where does CU_MEM_LOCATION_TYPE_DEVICE_LOCALITY_DOMAIN memory land, and does the driver
 * have it? cuda.h (13.4): "a portion of device memory, specified by the locality domain ID",
 * in CUmemLocation's `localized { deviceId, localityDomainId }`. With the device's locality
 * domain count (CU_DEVICE_ATTRIBUTE_LOCALITY_DOMAIN_COUNT, 149; "domains=unsupported" where
 * the driver has no such attribute), 512 MiB in its last domain with cuMemCreate, then from a
 * pool cuMemPoolCreate makes there. */
#include "ask.h"

typedef CUresult (*fn_cuDeviceGetAttribute)(int *value, int attribute, CUdevice dev);
typedef CUresult (*fn_cuMemPoolDestroy)(CUmemoryPool pool);

int main(void) {
    ask_open();
    use_primary();
    FN(cuDeviceGetAttribute);
    FN(cuMemCreate);
    FN(cuMemRelease);
    FN(cuMemPoolCreate);
    FN(cuMemPoolDestroy);
    FN(cuMemAllocFromPoolAsync);
    FN(cuMemFreeAsync);
    FN(cuCtxSynchronize);
    int domains = 0;
    CUresult rc = cuDeviceGetAttribute(&domains, 149, 0);
    if (rc || domains <= 0) {
        printf("domains=unsupported rc=%d value=%d\n", rc, domains);
        return 0;
    }
    printf("domains=%d\n", domains);
    CUmemLocation at;
    memset(&at, 0, sizeof at);
    at.type = CU_MEM_LOCATION_TYPE_DEVICE_LOCALITY_DOMAIN;
    at.localized.deviceId = 0;
    at.localized.localityDomainId = (unsigned char)(domains - 1);
    CUmemAllocationProp prop;
    CUmemGenericAllocationHandle h = 0;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location = at;
    report("start");
    rc = cuMemCreate(&h, 512 * MIB, &prop, 0);
    printf("create_rc=%d\n", rc);
    report("created");
    if (rc == 0) {
        MUST(cuMemRelease(h));
        report("released");
    }
    CUmemPoolProps props;
    CUmemoryPool pool = NULL;
    CUdeviceptr p = 0;
    memset(&props, 0, sizeof props);
    props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    props.location = at;
    rc = cuMemPoolCreate(&pool, &props);
    printf("pool_rc=%d\n", rc);
    if (rc == 0) {
        MUST(cuMemAllocFromPoolAsync(&p, 512 * MIB, pool, NULL));
        MUST(cuCtxSynchronize());
        report("pool_allocated");
        MUST(cuMemFreeAsync(p, NULL));
        MUST(cuMemPoolDestroy(pool));
        MUST(cuCtxSynchronize());
        report("pool_destroyed");
    }
    return 0;
}
