//! Functions common clients resolve up front (ffmpeg's loader, PyCUDA, Taichi) that the
//! shim cannot honestly simulate: it has no kernels, modules, textures, surfaces,
//! graphics interop or external semaphores. They exist so that loaders load, and return
//! `CUDA_ERROR_NOT_SUPPORTED`, never success. Written by `scripts/gen-shim-stubs.py`
//! (rows from the public typedef headers); the arguments are not read, so none are
//! declared (C callers clean up their own arguments).

use crate::abi::*;

exports! {
    fn cuModuleLoad() as cuModuleLoad since 2000 {
        Err(CUDA_ERROR_NOT_SUPPORTED)
    }

    fn cuModuleLoadData() as cuModuleLoadData since 2000 {
        Err(CUDA_ERROR_NOT_SUPPORTED)
    }

    fn cuModuleLoadDataEx() as cuModuleLoadDataEx since 2010 {
        Err(CUDA_ERROR_NOT_SUPPORTED)
    }

    fn cuModuleLoadFatBinary() as cuModuleLoadFatBinary since 2000 {
        Err(CUDA_ERROR_NOT_SUPPORTED)
    }

    fn cuModuleUnload() as cuModuleUnload since 2000 {
        Err(CUDA_ERROR_NOT_SUPPORTED)
    }

    fn cuModuleGetFunction() as cuModuleGetFunction since 2000 {
        Err(CUDA_ERROR_NOT_SUPPORTED)
    }

    fn cuModuleGetGlobal() as cuModuleGetGlobal since 2000 {
        Err(CUDA_ERROR_NOT_SUPPORTED)
    }

    fn cuModuleGetGlobal_v2() as cuModuleGetGlobal since 3020 {
        Err(CUDA_ERROR_NOT_SUPPORTED)
    }

    fn cuModuleGetTexRef() as cuModuleGetTexRef since 2000 {
        Err(CUDA_ERROR_NOT_SUPPORTED)
    }

    fn cuModuleGetSurfRef() as cuModuleGetSurfRef since 3000 {
        Err(CUDA_ERROR_NOT_SUPPORTED)
    }

    fn cuModuleGetLoadingMode() as cuModuleGetLoadingMode since 11070 {
        Err(CUDA_ERROR_NOT_SUPPORTED)
    }

    fn cuLinkCreate() as cuLinkCreate since 5050 {
        Err(CUDA_ERROR_NOT_SUPPORTED)
    }

    fn cuLinkCreate_v2() as cuLinkCreate since 6050 {
        Err(CUDA_ERROR_NOT_SUPPORTED)
    }

    fn cuLinkAddData() as cuLinkAddData since 5050 {
        Err(CUDA_ERROR_NOT_SUPPORTED)
    }

    fn cuLinkAddData_v2() as cuLinkAddData since 6050 {
        Err(CUDA_ERROR_NOT_SUPPORTED)
    }

    fn cuLinkAddFile() as cuLinkAddFile since 5050 {
        Err(CUDA_ERROR_NOT_SUPPORTED)
    }

    fn cuLinkAddFile_v2() as cuLinkAddFile since 6050 {
        Err(CUDA_ERROR_NOT_SUPPORTED)
    }

    fn cuLinkComplete() as cuLinkComplete since 5050 {
        Err(CUDA_ERROR_NOT_SUPPORTED)
    }

    fn cuLinkDestroy() as cuLinkDestroy since 5050 {
        Err(CUDA_ERROR_NOT_SUPPORTED)
    }

    fn cuLibraryLoadData() as cuLibraryLoadData since 12000 {
        Err(CUDA_ERROR_NOT_SUPPORTED)
    }

    fn cuLibraryLoadFromFile() as cuLibraryLoadFromFile since 12000 {
        Err(CUDA_ERROR_NOT_SUPPORTED)
    }

    fn cuLibraryUnload() as cuLibraryUnload since 12000 {
        Err(CUDA_ERROR_NOT_SUPPORTED)
    }

    fn cuLibraryGetKernel() as cuLibraryGetKernel since 12000 {
        Err(CUDA_ERROR_NOT_SUPPORTED)
    }

    fn cuLibraryGetModule() as cuLibraryGetModule since 12000 {
        Err(CUDA_ERROR_NOT_SUPPORTED)
    }

    fn cuLaunchKernel() as cuLaunchKernel since 4000 {
        Err(CUDA_ERROR_NOT_SUPPORTED)
    }

    fn cuLaunchKernelEx() as cuLaunchKernelEx since 11060 {
        Err(CUDA_ERROR_NOT_SUPPORTED)
    }

    fn cuLaunchCooperativeKernel() as cuLaunchCooperativeKernel since 9000 {
        Err(CUDA_ERROR_NOT_SUPPORTED)
    }

    fn cuLaunch() as cuLaunch since 2000 {
        Err(CUDA_ERROR_NOT_SUPPORTED)
    }

    fn cuLaunchGrid() as cuLaunchGrid since 2000 {
        Err(CUDA_ERROR_NOT_SUPPORTED)
    }

    fn cuLaunchGridAsync() as cuLaunchGridAsync since 2000 {
        Err(CUDA_ERROR_NOT_SUPPORTED)
    }

    fn cuLaunchHostFunc() as cuLaunchHostFunc since 10000 {
        Err(CUDA_ERROR_NOT_SUPPORTED)
    }

    fn cuFuncGetAttribute() as cuFuncGetAttribute since 2020 {
        Err(CUDA_ERROR_NOT_SUPPORTED)
    }

    fn cuFuncSetAttribute() as cuFuncSetAttribute since 9000 {
        Err(CUDA_ERROR_NOT_SUPPORTED)
    }

    fn cuFuncSetCacheConfig() as cuFuncSetCacheConfig since 3000 {
        Err(CUDA_ERROR_NOT_SUPPORTED)
    }

    fn cuFuncSetSharedMemConfig() as cuFuncSetSharedMemConfig since 4020 {
        Err(CUDA_ERROR_NOT_SUPPORTED)
    }

    fn cuFuncSetBlockShape() as cuFuncSetBlockShape since 2000 {
        Err(CUDA_ERROR_NOT_SUPPORTED)
    }

    fn cuFuncSetSharedSize() as cuFuncSetSharedSize since 2000 {
        Err(CUDA_ERROR_NOT_SUPPORTED)
    }

    fn cuFuncGetModule() as cuFuncGetModule since 11000 {
        Err(CUDA_ERROR_NOT_SUPPORTED)
    }

    fn cuParamSetSize() as cuParamSetSize since 2000 {
        Err(CUDA_ERROR_NOT_SUPPORTED)
    }

    fn cuParamSeti() as cuParamSeti since 2000 {
        Err(CUDA_ERROR_NOT_SUPPORTED)
    }

    fn cuParamSetf() as cuParamSetf since 2000 {
        Err(CUDA_ERROR_NOT_SUPPORTED)
    }

    fn cuParamSetv() as cuParamSetv since 2000 {
        Err(CUDA_ERROR_NOT_SUPPORTED)
    }

    fn cuParamSetTexRef() as cuParamSetTexRef since 2000 {
        Err(CUDA_ERROR_NOT_SUPPORTED)
    }

    fn cuOccupancyMaxActiveBlocksPerMultiprocessor() as cuOccupancyMaxActiveBlocksPerMultiprocessor since 6050 {
        Err(CUDA_ERROR_NOT_SUPPORTED)
    }

    fn cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags() as cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags since 7000 {
        Err(CUDA_ERROR_NOT_SUPPORTED)
    }

    fn cuOccupancyMaxPotentialBlockSize() as cuOccupancyMaxPotentialBlockSize since 6050 {
        Err(CUDA_ERROR_NOT_SUPPORTED)
    }

    fn cuOccupancyMaxPotentialBlockSizeWithFlags() as cuOccupancyMaxPotentialBlockSizeWithFlags since 7000 {
        Err(CUDA_ERROR_NOT_SUPPORTED)
    }

    fn cuOccupancyAvailableDynamicSMemPerBlock() as cuOccupancyAvailableDynamicSMemPerBlock since 10020 {
        Err(CUDA_ERROR_NOT_SUPPORTED)
    }

    fn cuTexObjectCreate() as cuTexObjectCreate since 5000 {
        Err(CUDA_ERROR_NOT_SUPPORTED)
    }

    fn cuTexObjectDestroy() as cuTexObjectDestroy since 5000 {
        Err(CUDA_ERROR_NOT_SUPPORTED)
    }

    fn cuTexObjectGetResourceDesc() as cuTexObjectGetResourceDesc since 5000 {
        Err(CUDA_ERROR_NOT_SUPPORTED)
    }

    fn cuSurfObjectCreate() as cuSurfObjectCreate since 5000 {
        Err(CUDA_ERROR_NOT_SUPPORTED)
    }

    fn cuSurfObjectDestroy() as cuSurfObjectDestroy since 5000 {
        Err(CUDA_ERROR_NOT_SUPPORTED)
    }

    fn cuTexRefCreate() as cuTexRefCreate since 2000 {
        Err(CUDA_ERROR_NOT_SUPPORTED)
    }

    fn cuTexRefDestroy() as cuTexRefDestroy since 2000 {
        Err(CUDA_ERROR_NOT_SUPPORTED)
    }

    fn cuTexRefSetArray() as cuTexRefSetArray since 2000 {
        Err(CUDA_ERROR_NOT_SUPPORTED)
    }

    fn cuTexRefSetMipmappedArray() as cuTexRefSetMipmappedArray since 5000 {
        Err(CUDA_ERROR_NOT_SUPPORTED)
    }

    fn cuTexRefSetAddress_v2() as cuTexRefSetAddress since 3020 {
        Err(CUDA_ERROR_NOT_SUPPORTED)
    }

    fn cuTexRefSetAddress2D_v3() as cuTexRefSetAddress2D since 4010 {
        Err(CUDA_ERROR_NOT_SUPPORTED)
    }

    fn cuTexRefSetFormat() as cuTexRefSetFormat since 2000 {
        Err(CUDA_ERROR_NOT_SUPPORTED)
    }

    fn cuTexRefSetAddressMode() as cuTexRefSetAddressMode since 2000 {
        Err(CUDA_ERROR_NOT_SUPPORTED)
    }

    fn cuTexRefSetFilterMode() as cuTexRefSetFilterMode since 2000 {
        Err(CUDA_ERROR_NOT_SUPPORTED)
    }

    fn cuTexRefSetFlags() as cuTexRefSetFlags since 2000 {
        Err(CUDA_ERROR_NOT_SUPPORTED)
    }

    fn cuTexRefGetAddress_v2() as cuTexRefGetAddress since 3020 {
        Err(CUDA_ERROR_NOT_SUPPORTED)
    }

    fn cuTexRefGetArray() as cuTexRefGetArray since 2000 {
        Err(CUDA_ERROR_NOT_SUPPORTED)
    }

    fn cuTexRefGetAddressMode() as cuTexRefGetAddressMode since 2000 {
        Err(CUDA_ERROR_NOT_SUPPORTED)
    }

    fn cuTexRefGetFilterMode() as cuTexRefGetFilterMode since 2000 {
        Err(CUDA_ERROR_NOT_SUPPORTED)
    }

    fn cuTexRefGetFormat() as cuTexRefGetFormat since 2000 {
        Err(CUDA_ERROR_NOT_SUPPORTED)
    }

    fn cuTexRefGetFlags() as cuTexRefGetFlags since 2000 {
        Err(CUDA_ERROR_NOT_SUPPORTED)
    }

    fn cuSurfRefSetArray() as cuSurfRefSetArray since 3000 {
        Err(CUDA_ERROR_NOT_SUPPORTED)
    }

    fn cuSurfRefGetArray() as cuSurfRefGetArray since 3000 {
        Err(CUDA_ERROR_NOT_SUPPORTED)
    }

    fn cuGLGetDevices_v2() as cuGLGetDevices since 6050 {
        Err(CUDA_ERROR_NOT_SUPPORTED)
    }

    fn cuGLCtxCreate_v2() as cuGLCtxCreate since 3020 {
        Err(CUDA_ERROR_NOT_SUPPORTED)
    }

    fn cuGLInit() as cuGLInit since 2000 {
        Err(CUDA_ERROR_NOT_SUPPORTED)
    }

    fn cuGLRegisterBufferObject() as cuGLRegisterBufferObject since 2000 {
        Err(CUDA_ERROR_NOT_SUPPORTED)
    }

    fn cuGLMapBufferObject_v2() as cuGLMapBufferObject since 3020 {
        Err(CUDA_ERROR_NOT_SUPPORTED)
    }

    fn cuGLUnmapBufferObject() as cuGLUnmapBufferObject since 2000 {
        Err(CUDA_ERROR_NOT_SUPPORTED)
    }

    fn cuGLUnregisterBufferObject() as cuGLUnregisterBufferObject since 2000 {
        Err(CUDA_ERROR_NOT_SUPPORTED)
    }

    fn cuGraphicsGLRegisterBuffer() as cuGraphicsGLRegisterBuffer since 3000 {
        Err(CUDA_ERROR_NOT_SUPPORTED)
    }

    fn cuGraphicsGLRegisterImage() as cuGraphicsGLRegisterImage since 3000 {
        Err(CUDA_ERROR_NOT_SUPPORTED)
    }

    fn cuGraphicsUnregisterResource() as cuGraphicsUnregisterResource since 3000 {
        Err(CUDA_ERROR_NOT_SUPPORTED)
    }

    fn cuGraphicsMapResources() as cuGraphicsMapResources since 3000 {
        Err(CUDA_ERROR_NOT_SUPPORTED)
    }

    fn cuGraphicsUnmapResources() as cuGraphicsUnmapResources since 3000 {
        Err(CUDA_ERROR_NOT_SUPPORTED)
    }

    fn cuGraphicsSubResourceGetMappedArray() as cuGraphicsSubResourceGetMappedArray since 3000 {
        Err(CUDA_ERROR_NOT_SUPPORTED)
    }

    fn cuGraphicsResourceGetMappedPointer_v2() as cuGraphicsResourceGetMappedPointer since 3020 {
        Err(CUDA_ERROR_NOT_SUPPORTED)
    }

    fn cuGraphicsResourceSetMapFlags_v2() as cuGraphicsResourceSetMapFlags since 6050 {
        Err(CUDA_ERROR_NOT_SUPPORTED)
    }

    fn cuGraphicsResourceGetMappedMipmappedArray() as cuGraphicsResourceGetMappedMipmappedArray since 5000 {
        Err(CUDA_ERROR_NOT_SUPPORTED)
    }

    fn cuExternalMemoryGetMappedMipmappedArray() as cuExternalMemoryGetMappedMipmappedArray since 10000 {
        Err(CUDA_ERROR_NOT_SUPPORTED)
    }

    fn cuImportExternalSemaphore() as cuImportExternalSemaphore since 10000 {
        Err(CUDA_ERROR_NOT_SUPPORTED)
    }

    fn cuDestroyExternalSemaphore() as cuDestroyExternalSemaphore since 10000 {
        Err(CUDA_ERROR_NOT_SUPPORTED)
    }

    fn cuSignalExternalSemaphoresAsync() as cuSignalExternalSemaphoresAsync since 10000 {
        Err(CUDA_ERROR_NOT_SUPPORTED)
    }

    fn cuWaitExternalSemaphoresAsync() as cuWaitExternalSemaphoresAsync since 10000 {
        Err(CUDA_ERROR_NOT_SUPPORTED)
    }

    fn cuStreamAddCallback() as cuStreamAddCallback since 5000 {
        Err(CUDA_ERROR_NOT_SUPPORTED)
    }

    fn cuStreamAttachMemAsync() as cuStreamAttachMemAsync since 6000 {
        Err(CUDA_ERROR_NOT_SUPPORTED)
    }

    fn cuMemcpy3D_v2() as cuMemcpy3D since 3020 {
        Err(CUDA_ERROR_NOT_SUPPORTED)
    }

    fn cuMemcpy3DAsync_v2() as cuMemcpy3DAsync since 3020 {
        Err(CUDA_ERROR_NOT_SUPPORTED)
    }

    fn cuMemcpy3DPeer() as cuMemcpy3DPeer since 4000 {
        Err(CUDA_ERROR_NOT_SUPPORTED)
    }

    fn cuMemcpy3DPeerAsync() as cuMemcpy3DPeerAsync since 4000 {
        Err(CUDA_ERROR_NOT_SUPPORTED)
    }

    fn cuMemcpyAtoA_v2() as cuMemcpyAtoA since 3020 {
        Err(CUDA_ERROR_NOT_SUPPORTED)
    }

    fn cuMemcpyAtoD_v2() as cuMemcpyAtoD since 3020 {
        Err(CUDA_ERROR_NOT_SUPPORTED)
    }

    fn cuMemcpyAtoH_v2() as cuMemcpyAtoH since 3020 {
        Err(CUDA_ERROR_NOT_SUPPORTED)
    }

    fn cuMemcpyAtoHAsync_v2() as cuMemcpyAtoHAsync since 3020 {
        Err(CUDA_ERROR_NOT_SUPPORTED)
    }

    fn cuMemcpyDtoA_v2() as cuMemcpyDtoA since 3020 {
        Err(CUDA_ERROR_NOT_SUPPORTED)
    }

    fn cuMemcpyHtoA_v2() as cuMemcpyHtoA since 3020 {
        Err(CUDA_ERROR_NOT_SUPPORTED)
    }

    fn cuMemcpyHtoAAsync_v2() as cuMemcpyHtoAAsync since 3020 {
        Err(CUDA_ERROR_NOT_SUPPORTED)
    }

    fn cuMemcpyPeer() as cuMemcpyPeer since 4000 {
        Err(CUDA_ERROR_NOT_SUPPORTED)
    }

    fn cuMemcpyPeerAsync() as cuMemcpyPeerAsync since 4000 {
        Err(CUDA_ERROR_NOT_SUPPORTED)
    }

    fn cuMemsetD2D8_v2() as cuMemsetD2D8 since 3020 {
        Err(CUDA_ERROR_NOT_SUPPORTED)
    }

    fn cuMemsetD2D16_v2() as cuMemsetD2D16 since 3020 {
        Err(CUDA_ERROR_NOT_SUPPORTED)
    }

    fn cuMemsetD2D32_v2() as cuMemsetD2D32 since 3020 {
        Err(CUDA_ERROR_NOT_SUPPORTED)
    }

    fn cuMemsetD2D8Async() as cuMemsetD2D8Async since 3020 {
        Err(CUDA_ERROR_NOT_SUPPORTED)
    }

    fn cuMemsetD2D16Async() as cuMemsetD2D16Async since 3020 {
        Err(CUDA_ERROR_NOT_SUPPORTED)
    }

    fn cuMemsetD2D32Async() as cuMemsetD2D32Async since 3020 {
        Err(CUDA_ERROR_NOT_SUPPORTED)
    }

    fn cuMemPrefetchAsync() as cuMemPrefetchAsync since 8000 {
        Err(CUDA_ERROR_NOT_SUPPORTED)
    }

    fn cuMemPrefetchAsync_v2() as cuMemPrefetchAsync since 12020 {
        Err(CUDA_ERROR_NOT_SUPPORTED)
    }

    fn cuMemRangeGetAttribute() as cuMemRangeGetAttribute since 8000 {
        Err(CUDA_ERROR_NOT_SUPPORTED)
    }

    fn cuCtxGetCacheConfig() as cuCtxGetCacheConfig since 3020 {
        Err(CUDA_ERROR_NOT_SUPPORTED)
    }

    fn cuCtxSetCacheConfig() as cuCtxSetCacheConfig since 3020 {
        Err(CUDA_ERROR_NOT_SUPPORTED)
    }

    fn cuCtxGetSharedMemConfig() as cuCtxGetSharedMemConfig since 4020 {
        Err(CUDA_ERROR_NOT_SUPPORTED)
    }

    fn cuCtxSetSharedMemConfig() as cuCtxSetSharedMemConfig since 4020 {
        Err(CUDA_ERROR_NOT_SUPPORTED)
    }

    fn cuCtxEnablePeerAccess() as cuCtxEnablePeerAccess since 4000 {
        Err(CUDA_ERROR_NOT_SUPPORTED)
    }

    fn cuCtxDisablePeerAccess() as cuCtxDisablePeerAccess since 4000 {
        Err(CUDA_ERROR_NOT_SUPPORTED)
    }

    fn cuProfilerStart() as cuProfilerStart since 4000 {
        Err(CUDA_ERROR_NOT_SUPPORTED)
    }

    fn cuProfilerStop() as cuProfilerStop since 4000 {
        Err(CUDA_ERROR_NOT_SUPPORTED)
    }
}
