/* A stand-in for real clients' driver loaders: ffmpeg's (dlopen + dlsym of a fixed list,
 * refusing to start when one is missing) and PyCUDA's (an extension linked against every
 * function, loaded with -z now so each must resolve at start).
 *
 *   loaders dlsym   — dlopen libcuda.so.1 and dlsym every name; prints "missing NAME".
 *   loaders linked  — built with -DLINKED against -lcuda -z now: loading is the test.
 * Then both use what ffmpeg really uses (2D frame copies, a context limit) and check that
 * what cannot be simulated says CUDA_ERROR_NOT_SUPPORTED; one line per check. */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>

#include "loader_names.h"

typedef int (*fn)();

#ifdef LINKED
#define FFMPEG(n) extern int n();
#define PYCUDA(n) extern int n();
FFMPEG_NAMES
PYCUDA_NAMES
#undef FFMPEG
#undef PYCUDA
#define FFMPEG(n) {#n, (fn)n},
#define PYCUDA(n) {#n, (fn)n},
#else
#define FFMPEG(n) {#n, 0},
#define PYCUDA(n) {#n, 0},
#endif
static struct { const char *name; fn f; } names[] = { FFMPEG_NAMES PYCUDA_NAMES };
#undef FFMPEG
#undef PYCUDA
#define COUNT (sizeof names / sizeof names[0])

static fn get(const char *name) {
  for (size_t i = 0; i < COUNT; i++)
    if (!strcmp(names[i].name, name)) return names[i].f;
  abort();
}
#define CALL(name, ...) get(#name)(__VA_ARGS__)

/* CUDA_MEMCPY2D (cuda.h's layout: our own definition). */
typedef struct {
  size_t srcXInBytes, srcY;
  unsigned srcMemoryType;
  const void *srcHost;
  uint64_t srcDevice;
  void *srcArray;
  size_t srcPitch;
  size_t dstXInBytes, dstY;
  unsigned dstMemoryType;
  void *dstHost;
  uint64_t dstDevice;
  void *dstArray;
  size_t dstPitch;
  size_t WidthInBytes, Height;
} Memcpy2D;

int main(int argc, char **argv) {
  if (argc != 2) return 2;
#ifndef LINKED
  void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
  if (!lib) {
    printf("dlopen %s\n", dlerror());
    return 1;
  }
  int missing = 0;
  for (size_t i = 0; i < COUNT; i++) {
    names[i].f = (fn)dlsym(lib, names[i].name);
    if (!names[i].f) {
      printf("missing %s\n", names[i].name);
      missing++;
    }
  }
  if (missing) return 1;
#endif
  printf("resolved %zu\n", COUNT);

  int dev, rc;
  void *ctx;
  uint64_t d;
  size_t pitch, limit = 0;
  printf("init %d\n", CALL(cuInit, 0));
  CALL(cuDeviceGet, &dev, 0);
  printf("ctx %d\n", CALL(cuCtxCreate_v2, &ctx, 0, dev));
  printf("setlimit %d\n", CALL(cuCtxSetLimit, 2, (size_t)64 << 20));
  rc = CALL(cuCtxGetLimit, &limit, 2);
  printf("getlimit %d %zu\n", rc, limit);

  /* A 3-row frame of 100 bytes, host (pitch 128) -> device (pitched) -> host (pitch 100). */
  enum { W = 100, H = 3, HP = 128 };
  unsigned char in[HP * H], out[W * H];
  for (int i = 0; i < HP * H; i++) in[i] = (unsigned char)(i * 7 + 1);
  memset(out, 0, sizeof out);
  printf("pitch %d\n", CALL(cuMemAllocPitch_v2, &d, &pitch, (size_t)W, (size_t)H, 4));
  Memcpy2D up = {0}, down = {0};
  up.srcMemoryType = 1, up.srcHost = in, up.srcPitch = HP;
  up.dstMemoryType = 2, up.dstDevice = d, up.dstPitch = pitch;
  up.WidthInBytes = W, up.Height = H;
  printf("htod2d %d\n", CALL(cuMemcpy2D_v2, &up));
  down.srcMemoryType = 2, down.srcDevice = d, down.srcPitch = pitch;
  down.dstMemoryType = 1, down.dstHost = out, down.dstPitch = W;
  down.WidthInBytes = W, down.Height = H;
  printf("dtoh2d %d\n", CALL(cuMemcpy2DAsync_v2, &down, (void *)0));
  int same = 1;
  for (int y = 0; y < H; y++) same &= !memcmp(out + y * W, in + y * HP, W);
  printf("frame %s\n", same ? "same" : "different");
  /* A row longer than the pitch. */
  down.dstPitch = W - 1;
  printf("badpitch %d\n", CALL(cuMemcpy2D_v2, &down));
  /* What the driver knows about the pointer (CU_POINTER_ATTRIBUTE_*). */
  unsigned type = 0;
  int ordinal = -1;
  uint64_t start = 0;
  size_t range = 0;
  /* (Each call before the printf that shows its output: argument order is unspecified.) */
  rc = CALL(cuPointerGetAttribute, &type, 2, d + 8);
  printf("attr-type %d %u\n", rc, type);
  rc = CALL(cuPointerGetAttribute, &ordinal, 9, d + 8);
  printf("attr-ordinal %d %d\n", rc, ordinal);
  rc = CALL(cuPointerGetAttribute, &start, 11, d + 8);
  rc |= CALL(cuPointerGetAttribute, &range, 12, d + 8);
  printf("attr-range %d %d %zu\n", rc, start == d, range);
  printf("advise %d\n", CALL(cuMemAdvise, d, (size_t)256, 1, 0));
  printf("free %d\n", CALL(cuMemFree_v2, d));
  printf("attr-freed %d\n", CALL(cuPointerGetAttribute, &type, 2, d + 8));

  /* The caller's own memory, registered: host memory to the driver, usable in copies. */
  enum { R = 1 << 16 };
  unsigned char *reg = malloc(R);
  memset(reg, 0, R);
  printf("register %d\n", CALL(cuMemHostRegister_v2, reg, (size_t)R, 0));
  printf("register-again %d\n", CALL(cuMemHostRegister_v2, reg + 64, (size_t)64, 0));
  type = 0;
  rc = CALL(cuPointerGetAttribute, &type, 2, (uint64_t)(uintptr_t)reg);
  printf("attr-host %d %u\n", rc, type);
  uint64_t alias = 0;
  rc = CALL(cuMemHostGetDevicePointer_v2, &alias, reg + 8, 0);
  printf("registered-alias %d %d\n", rc, alias == (uint64_t)(uintptr_t)(reg + 8));
  rc = CALL(cuMemsetD8_v2, (uint64_t)(uintptr_t)reg, 7, (size_t)R);
  printf("memset-registered %d %u\n", rc, reg[R - 1]);
  printf("unregister %d\n", CALL(cuMemHostUnregister, reg));
  printf("unregister-again %d\n", CALL(cuMemHostUnregister, reg));
  free(reg);

  /* What the stand-in cannot simulate. */
  void *mod = 0;
  printf("moduleload %d\n", CALL(cuModuleLoadData, &mod, "x"));
  printf("launch %d\n", CALL(cuLaunchKernel, (void *)0, 1, 1, 1, 1, 1, 1, 0, (void *)0,
                             (void *)0, (void *)0));
  printf("glgetdevices %d\n", CALL(cuGLGetDevices_v2, (void *)0, (void *)0, 0, 0));
  return 0;
}
