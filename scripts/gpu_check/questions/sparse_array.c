/* Does a mapping into a deferred-mapping array keep cuMemCreate memory alive? cuda.h on
 * cuMemRelease: freed "when all outstanding mappings to the memory are unmapped", and
 * cuMemMapArrayAsync maps a tile pool's memory (CU_MEM_CREATE_USAGE_TILE_POOL) into a sparse
 * or deferred-mapping array. A 4096 x 4096 RGBA8 deferred-mapping array, backed by a tile
 * pool of its memory requirements, mapped; the handle released; then unmapped. */
#include "ask.h"

_Static_assert(sizeof(CUarrayMapInfo) == 96, "CUarrayMapInfo is 96 bytes");

#define DEFERRED_MAPPING 0x80 /* CUDA_ARRAY3D_DEFERRED_MAPPING */
#define TILE_POOL 0x1         /* CU_MEM_CREATE_USAGE_TILE_POOL */
#define GRANULE (2 * MIB)

int main(void) {
    ask_open();
    use_primary();
    FN(cuArray3DCreate_v2);
    FN(cuArrayDestroy);
    FN(cuArrayGetMemoryRequirements);
    FN(cuMemCreate);
    FN(cuMemRelease);
    FN(cuMemMapArrayAsync);
    FN(cuCtxSynchronize);
    CUDA_ARRAY3D_DESCRIPTOR desc;
    CUDA_ARRAY_MEMORY_REQUIREMENTS req;
    CUmemAllocationProp prop;
    CUarrayMapInfo map;
    CUarray array = NULL;
    CUmemGenericAllocationHandle h = 0;
    memset(&desc, 0, sizeof desc);
    desc.Width = 4096;
    desc.Height = 4096;
    desc.Format = 0x01; /* CU_AD_FORMAT_UNSIGNED_INT8 */
    desc.NumChannels = 4;
    desc.Flags = DEFERRED_MAPPING;
    report("start");
    MUST(cuArray3DCreate_v2(&array, &desc));
    MUST(cuArrayGetMemoryRequirements(&req, array, 0));
    size_t size = (req.size + GRANULE - 1) / GRANULE * GRANULE;
    printf("array_bytes=%zu pool_bytes=%zu\n", req.size, size);
    report("array");
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    prop.allocFlags[2] = TILE_POOL; /* allocFlags.usage, an unsigned short at byte 2 */
    MUST(cuMemCreate(&h, size, &prop, 0));
    report("created");
    memset(&map, 0, sizeof map);
    map.resource = array;
    map.memOperationType = 1;
    map.memHandle = h;
    map.deviceBitMask = 1;
    MUST(cuMemMapArrayAsync(&map, 1, NULL));
    MUST(cuCtxSynchronize());
    report("mapped");
    MUST(cuMemRelease(h));
    report("released");
    map.memOperationType = 2;
    map.memHandle = 0;
    MUST(cuMemMapArrayAsync(&map, 1, NULL));
    MUST(cuCtxSynchronize());
    report("unmapped");
    MUST(cuArrayDestroy(array));
    report("destroyed");
    return 0;
}
