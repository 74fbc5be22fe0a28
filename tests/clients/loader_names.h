/* The driver functions real clients' loaders resolve before any allocation, as X-macro
 * lists: FFMPEG(name) for ffmpeg's ffnvcodec loader (dynlink_loader.h: required and
 * optional names), PYCUDA(name) for what PyCUDA's extension links (the part of it beyond
 * ffmpeg's list; cuCtxAttach/cuCtxDetach are left out: context references belong to the
 * context work of another issue). */
#define FFMPEG_NAMES \
  FFMPEG(cuInit) FFMPEG(cuDeviceGetCount) FFMPEG(cuDeviceGet) FFMPEG(cuDeviceGetAttribute) \
  FFMPEG(cuDeviceGetName) FFMPEG(cuDeviceComputeCapability) FFMPEG(cuCtxCreate_v2) \
  FFMPEG(cuCtxSetLimit) FFMPEG(cuCtxPushCurrent_v2) FFMPEG(cuCtxPopCurrent_v2) \
  FFMPEG(cuCtxDestroy_v2) FFMPEG(cuMemAlloc_v2) FFMPEG(cuMemAllocPitch_v2) \
  FFMPEG(cuMemsetD8Async) FFMPEG(cuMemFree_v2) FFMPEG(cuMemcpy) FFMPEG(cuMemcpyAsync) \
  FFMPEG(cuMemcpy2D_v2) FFMPEG(cuMemcpy2DAsync_v2) FFMPEG(cuGetErrorName) \
  FFMPEG(cuGetErrorString) FFMPEG(cuCtxGetDevice) FFMPEG(cuDevicePrimaryCtxRetain) \
  FFMPEG(cuDevicePrimaryCtxRelease) FFMPEG(cuDevicePrimaryCtxSetFlags) \
  FFMPEG(cuDevicePrimaryCtxGetState) FFMPEG(cuDevicePrimaryCtxReset) FFMPEG(cuStreamCreate) \
  FFMPEG(cuStreamQuery) FFMPEG(cuStreamSynchronize) FFMPEG(cuStreamDestroy_v2) \
  FFMPEG(cuStreamAddCallback) FFMPEG(cuEventCreate) FFMPEG(cuEventDestroy_v2) \
  FFMPEG(cuEventSynchronize) FFMPEG(cuEventQuery) FFMPEG(cuEventRecord) \
  FFMPEG(cuLaunchKernel) FFMPEG(cuLinkCreate) FFMPEG(cuLinkAddData) FFMPEG(cuLinkComplete) \
  FFMPEG(cuLinkDestroy) FFMPEG(cuModuleLoadData) FFMPEG(cuModuleUnload) \
  FFMPEG(cuModuleGetFunction) FFMPEG(cuModuleGetGlobal) FFMPEG(cuTexObjectCreate) \
  FFMPEG(cuTexObjectDestroy) FFMPEG(cuGLGetDevices_v2) FFMPEG(cuGraphicsGLRegisterImage) \
  FFMPEG(cuGraphicsUnregisterResource) FFMPEG(cuGraphicsMapResources) \
  FFMPEG(cuGraphicsUnmapResources) FFMPEG(cuGraphicsSubResourceGetMappedArray) \
  FFMPEG(cuDeviceGetUuid) FFMPEG(cuImportExternalMemory) FFMPEG(cuDestroyExternalMemory) \
  FFMPEG(cuExternalMemoryGetMappedBuffer) FFMPEG(cuExternalMemoryGetMappedMipmappedArray) \
  FFMPEG(cuMipmappedArrayGetLevel) FFMPEG(cuMipmappedArrayDestroy) \
  FFMPEG(cuImportExternalSemaphore) FFMPEG(cuDestroyExternalSemaphore) \
  FFMPEG(cuSignalExternalSemaphoresAsync) FFMPEG(cuWaitExternalSemaphoresAsync)

#define PYCUDA_NAMES \
  PYCUDA(cuDriverGetVersion) PYCUDA(cuDeviceTotalMem_v2) PYCUDA(cuDeviceGetPCIBusId) \
  PYCUDA(cuDeviceGetByPCIBusId) PYCUDA(cuDeviceCanAccessPeer) PYCUDA(cuCtxGetCurrent) \
  PYCUDA(cuCtxSetCurrent) PYCUDA(cuCtxSynchronize) PYCUDA(cuCtxGetApiVersion) \
  PYCUDA(cuCtxGetLimit) PYCUDA(cuCtxGetCacheConfig) PYCUDA(cuCtxSetCacheConfig) \
  PYCUDA(cuCtxGetSharedMemConfig) PYCUDA(cuCtxSetSharedMemConfig) \
  PYCUDA(cuCtxEnablePeerAccess) PYCUDA(cuCtxDisablePeerAccess) PYCUDA(cuModuleLoad) \
  PYCUDA(cuModuleLoadDataEx) PYCUDA(cuModuleGetGlobal_v2) PYCUDA(cuModuleGetTexRef) \
  PYCUDA(cuModuleGetSurfRef) PYCUDA(cuFuncGetAttribute) PYCUDA(cuFuncSetCacheConfig) \
  PYCUDA(cuFuncSetSharedMemConfig) PYCUDA(cuFuncSetBlockShape) PYCUDA(cuFuncSetSharedSize) \
  PYCUDA(cuParamSetSize) PYCUDA(cuParamSeti) PYCUDA(cuParamSetf) PYCUDA(cuParamSetv) \
  PYCUDA(cuParamSetTexRef) PYCUDA(cuLaunch) PYCUDA(cuLaunchGrid) PYCUDA(cuLaunchGridAsync) \
  PYCUDA(cuLinkCreate_v2) PYCUDA(cuLinkAddData_v2) PYCUDA(cuLinkAddFile_v2) \
  PYCUDA(cuTexRefCreate) PYCUDA(cuTexRefDestroy) PYCUDA(cuTexRefSetArray) \
  PYCUDA(cuTexRefSetAddress_v2) PYCUDA(cuTexRefSetAddress2D_v3) PYCUDA(cuTexRefSetFormat) \
  PYCUDA(cuTexRefSetAddressMode) PYCUDA(cuTexRefSetFilterMode) PYCUDA(cuTexRefSetFlags) \
  PYCUDA(cuTexRefGetAddress_v2) PYCUDA(cuTexRefGetArray) PYCUDA(cuTexRefGetAddressMode) \
  PYCUDA(cuTexRefGetFilterMode) PYCUDA(cuTexRefGetFormat) PYCUDA(cuTexRefGetFlags) \
  PYCUDA(cuSurfRefSetArray) PYCUDA(cuSurfRefGetArray) PYCUDA(cuArrayCreate_v2) \
  PYCUDA(cuArray3DCreate_v2) PYCUDA(cuArrayGetDescriptor_v2) PYCUDA(cuArray3DGetDescriptor_v2) \
  PYCUDA(cuArrayDestroy) PYCUDA(cuMemcpy2DUnaligned_v2) PYCUDA(cuMemcpy3D_v2) \
  PYCUDA(cuMemcpy3DAsync_v2) PYCUDA(cuMemcpyAtoA_v2) PYCUDA(cuMemcpyAtoD_v2) \
  PYCUDA(cuMemcpyAtoH_v2) PYCUDA(cuMemcpyAtoHAsync_v2) PYCUDA(cuMemcpyDtoA_v2) \
  PYCUDA(cuMemcpyHtoA_v2) PYCUDA(cuMemcpyHtoAAsync_v2) PYCUDA(cuMemcpyPeer) \
  PYCUDA(cuMemcpyPeerAsync) PYCUDA(cuMemcpyHtoD_v2) PYCUDA(cuMemcpyDtoH_v2) \
  PYCUDA(cuMemcpyDtoD_v2) PYCUDA(cuMemcpyHtoDAsync_v2) PYCUDA(cuMemcpyDtoHAsync_v2) \
  PYCUDA(cuMemcpyDtoDAsync_v2) PYCUDA(cuMemHostAlloc) PYCUDA(cuMemFreeHost) \
  PYCUDA(cuMemHostGetDevicePointer_v2) PYCUDA(cuMemHostGetFlags) PYCUDA(cuMemHostRegister_v2) \
  PYCUDA(cuMemHostUnregister) PYCUDA(cuMemGetInfo_v2) PYCUDA(cuMemGetAddressRange_v2) \
  PYCUDA(cuMemsetD8_v2) PYCUDA(cuMemsetD16_v2) PYCUDA(cuMemsetD32_v2) PYCUDA(cuMemsetD2D8_v2) \
  PYCUDA(cuMemsetD2D16_v2) PYCUDA(cuMemsetD2D32_v2) PYCUDA(cuMemsetD8Async) \
  PYCUDA(cuMemsetD16Async) PYCUDA(cuMemsetD32Async) PYCUDA(cuMemAllocManaged) \
  PYCUDA(cuStreamAttachMemAsync) PYCUDA(cuStreamWaitEvent) PYCUDA(cuPointerGetAttribute) \
  PYCUDA(cuIpcGetMemHandle) PYCUDA(cuIpcOpenMemHandle_v2) PYCUDA(cuIpcCloseMemHandle) \
  PYCUDA(cuEventElapsedTime) PYCUDA(cuGLCtxCreate_v2) PYCUDA(cuGLInit) \
  PYCUDA(cuGLRegisterBufferObject) PYCUDA(cuGLMapBufferObject_v2) \
  PYCUDA(cuGLUnmapBufferObject) PYCUDA(cuGLUnregisterBufferObject) \
  PYCUDA(cuGraphicsGLRegisterBuffer) PYCUDA(cuGraphicsResourceGetMappedPointer_v2) \
  PYCUDA(cuGraphicsResourceSetMapFlags_v2) PYCUDA(cuOccupancyMaxActiveBlocksPerMultiprocessor) \
  PYCUDA(cuProfilerStart) PYCUDA(cuProfilerStop) PYCUDA(cuMemAdvise) \
  PYCUDA(cuMemPrefetchAsync) PYCUDA(cuPointerGetAttributes)
