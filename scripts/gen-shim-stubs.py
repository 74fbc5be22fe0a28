#!/usr/bin/env python3
"""Writes shim/src/exports/unsupported.rs: the public driver functions that common clients
resolve up front but the shim cannot honestly simulate (module loading, launch, linking,
graphics interop, textures, surfaces, external semaphores, ...). Each exists and returns
CUDA_ERROR_NOT_SUPPORTED.

Development time only: reads NVIDIA's cudaTypedefs.h family (from the nvidia-cuda-runtime
wheel; never vendored) for each function's cuGetProcAddress row (base name, version).
Usage: scripts/gen-shim-stubs.py DIR_WITH_cudaTypedefs.h > shim/src/exports/unsupported.rs
"""
import glob, os, re, sys

# ffmpeg's ffnvcodec loader (dynlink_loader.h), PyCUDA's extension and Taichi's loader resolve
# these before any allocation; the shim has no kernels, modules, textures or graphics.
# (cuCtxAttach/cuCtxDetach are context references: left to the context work, not stubbed.)
NAMES = """
cuModuleLoad cuModuleLoadData cuModuleLoadDataEx cuModuleLoadFatBinary cuModuleUnload
cuModuleGetFunction cuModuleGetGlobal cuModuleGetGlobal_v2 cuModuleGetTexRef cuModuleGetSurfRef
cuModuleGetLoadingMode
cuLinkCreate cuLinkCreate_v2 cuLinkAddData cuLinkAddData_v2 cuLinkAddFile cuLinkAddFile_v2
cuLinkComplete cuLinkDestroy
cuLibraryLoadData cuLibraryLoadFromFile cuLibraryUnload cuLibraryGetKernel cuLibraryGetModule
cuLaunchKernel cuLaunchKernelEx cuLaunchCooperativeKernel cuLaunch cuLaunchGrid cuLaunchGridAsync
cuLaunchHostFunc
cuFuncGetAttribute cuFuncSetAttribute cuFuncSetCacheConfig cuFuncSetSharedMemConfig
cuFuncSetBlockShape cuFuncSetSharedSize cuFuncGetModule
cuParamSetSize cuParamSeti cuParamSetf cuParamSetv cuParamSetTexRef
cuOccupancyMaxActiveBlocksPerMultiprocessor cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags
cuOccupancyMaxPotentialBlockSize cuOccupancyMaxPotentialBlockSizeWithFlags
cuOccupancyAvailableDynamicSMemPerBlock
cuTexObjectCreate cuTexObjectDestroy cuTexObjectGetResourceDesc
cuSurfObjectCreate cuSurfObjectDestroy
cuTexRefCreate cuTexRefDestroy cuTexRefSetArray cuTexRefSetMipmappedArray cuTexRefSetAddress_v2
cuTexRefSetAddress2D_v3 cuTexRefSetFormat cuTexRefSetAddressMode cuTexRefSetFilterMode
cuTexRefSetFlags cuTexRefGetAddress_v2 cuTexRefGetArray cuTexRefGetAddressMode
cuTexRefGetFilterMode cuTexRefGetFormat cuTexRefGetFlags
cuSurfRefSetArray cuSurfRefGetArray
cuGLGetDevices_v2 cuGLCtxCreate_v2 cuGLInit cuGLRegisterBufferObject cuGLMapBufferObject_v2
cuGLUnmapBufferObject cuGLUnregisterBufferObject cuGraphicsGLRegisterBuffer
cuGraphicsGLRegisterImage
cuGraphicsUnregisterResource cuGraphicsMapResources cuGraphicsUnmapResources
cuGraphicsSubResourceGetMappedArray cuGraphicsResourceGetMappedPointer_v2
cuGraphicsResourceSetMapFlags_v2 cuGraphicsResourceGetMappedMipmappedArray
cuExternalMemoryGetMappedMipmappedArray
cuImportExternalSemaphore cuDestroyExternalSemaphore cuSignalExternalSemaphoresAsync
cuWaitExternalSemaphoresAsync
cuStreamAddCallback cuStreamAttachMemAsync
cuMemcpy3D_v2 cuMemcpy3DAsync_v2 cuMemcpy3DPeer cuMemcpy3DPeerAsync
cuMemcpyAtoA_v2 cuMemcpyAtoD_v2 cuMemcpyAtoH_v2 cuMemcpyAtoHAsync_v2 cuMemcpyDtoA_v2
cuMemcpyHtoA_v2 cuMemcpyHtoAAsync_v2 cuMemcpyPeer cuMemcpyPeerAsync
cuMemsetD2D8_v2 cuMemsetD2D16_v2 cuMemsetD2D32_v2
cuMemsetD2D8Async cuMemsetD2D16Async cuMemsetD2D32Async
cuMemPrefetchAsync cuMemPrefetchAsync_v2 cuMemRangeGetAttribute
cuCtxGetCacheConfig cuCtxSetCacheConfig cuCtxGetSharedMemConfig cuCtxSetSharedMemConfig
cuCtxEnablePeerAccess cuCtxDisablePeerAccess
cuProfilerStart cuProfilerStop
"""


def versions(include):
    """base name -> sorted distinct versions of its plain (not per-thread) PFN typedefs."""
    rows = {}
    for path in glob.glob(os.path.join(include, "*Typedefs.h")):
        for base, version in re.findall(r"PFN_(cu\w+?)_v(\d+)\)", open(path).read()):
            rows.setdefault(base, set()).add(int(version))
    return {base: sorted(v) for base, v in rows.items()}


def row(symbol, table):
    """(base, since) for a symbol: its N-th version for a `_vN` symbol, else its first."""
    m = re.fullmatch(r"(cu\w+?)_v(\d+)", symbol)
    base, n = (m.group(1), int(m.group(2))) if m else (symbol, 1)
    found = table.get(base)
    if not found:
        sys.exit(f"{symbol}: no PFN_{base}_v* typedef")
    return base, found[min(n, len(found)) - 1]


def main():
    table = versions(sys.argv[1])
    out = [
        "//! Functions common clients resolve up front (ffmpeg's loader, PyCUDA, Taichi) that the",
        "//! shim cannot honestly simulate: it has no kernels, modules, textures, surfaces,",
        "//! graphics interop or external semaphores. They exist so that loaders load, and return",
        "//! `CUDA_ERROR_NOT_SUPPORTED`, never success. Written by `scripts/gen-shim-stubs.py`",
        "//! (rows from the public typedef headers); the arguments are not read, so none are",
        "//! declared (C callers clean up their own arguments).",
        "",
        "use crate::abi::*;",
        "",
        "exports! {",
    ]
    for symbol in NAMES.split():
        base, since = row(symbol, table)
        out.append(f"    fn {symbol}() as {base} since {since} {{")
        out.append("        Err(CUDA_ERROR_NOT_SUPPORTED)")
        out.append("    }")
        out.append("")
    out[-1] = "}"
    print("\n".join(out))


main()
