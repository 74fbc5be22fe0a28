/* The ops on CUDA arrays (their rows: ops_table.h). FMT is a CUarray_format number, FLAGS
 * a CUDA_ARRAY3D_* mask, both decimal:
 *   array:W:H:FMT:CH        cuArrayCreate_v2; an array slot
 *   array3d:W:H:D:FMT:CH:FLAGS              cuArray3DCreate_v2; an array slot
 *   larray:W:H:FMT:CH / larray3d:W:H:D:FMT:CH:FLAGS   the same with the legacy
 *                           cuArrayCreate / cuArray3DCreate (32-bit dimensions)
 *   mipmap:W:H:D:FMT:CH:FLAGS:LEVELS        cuMipmappedArrayCreate; a mipmap slot
 *   arrdestroy:SLOT / mipdestroy:SLOT       cuArrayDestroy / cuMipmappedArrayDestroy
 *   arrreq:SLOT / mipreq:SLOT               cu(Mipmapped)ArrayGetMemoryRequirements on the
 *                           current device (not hooked: looked up with the client's dlsym)
 *   miplevel:SLOT:LEVEL     cuMipmappedArrayGetLevel (not hooked); an array slot */
#define _GNU_SOURCE
#include "ops_internal.h"

#include <limits.h>
#include <string.h>

int op_larray(const struct drv *d, char **f, int nf) {
    const char *op = f[0];
    CUresult rc;
    unsigned long long v[6] = {0};
    int i, want = !strcmp(op, "larray") ? 4 : 6;
    void *arr = NULL;
    NARGS(want);
    for (i = 0; i < want; i++)
        if (parse_num(f[i + 1], &v[i]) || v[i] > UINT_MAX)
            return -1;
    if (want == 4) {
        CUDA_ARRAY_DESCRIPTOR_v1 d1 = {(unsigned int)v[0], (unsigned int)v[1], (int)v[2],
                                       (unsigned int)v[3]};
        rc = CALL(d, cuArrayCreate, (CUarray *)&arr, &d1);
    } else {
        CUDA_ARRAY3D_DESCRIPTOR_v1 d1 = {(unsigned int)v[0], (unsigned int)v[1],
                                         (unsigned int)v[2], (int)v[3],
                                         (unsigned int)v[4], (unsigned int)v[5]};
        rc = CALL(d, cuArray3DCreate, (CUarray *)&arr, &d1);
    }
    if (rc)
        arr = NULL;
    out("%s %llu %llu rc=%d slot=%zu handle=%p", op, v[0], v[1], rc,
        push(&arrays, (unsigned long long)(size_t)arr, 0, rc == 0), arr);
    return 0;
}

int op_array(const struct drv *d, char **f, int nf) {
    const char *op = f[0];
    CUresult rc;
    unsigned long long v[7] = {0};
    int i, want = !strcmp(op, "array") ? 4 : !strcmp(op, "array3d") ? 6 : 7;
    CUDA_ARRAY3D_DESCRIPTOR d3;
    void *arr = NULL;
    size_t slot;
    NARGS(want);
    for (i = 0; i < want; i++)
        if (parse_num(f[i + 1], &v[i]))
            return -1;
    if (want == 4) {
        CUDA_ARRAY_DESCRIPTOR d2;
        d2.Width = v[0];
        d2.Height = v[1];
        d2.Format = (int)v[2];
        d2.NumChannels = (unsigned int)v[3];
        rc = CALL(d, cuArrayCreate_v2, (CUarray *)&arr, &d2);
    } else {
        d3.Width = v[0];
        d3.Height = v[1];
        d3.Depth = v[2];
        d3.Format = (int)v[3];
        d3.NumChannels = (unsigned int)v[4];
        d3.Flags = (unsigned int)v[5];
        if (want == 6)
            rc = CALL(d, cuArray3DCreate_v2, (CUarray *)&arr, &d3);
        else
            rc = CALL(d, cuMipmappedArrayCreate, (CUmipmappedArray *)&arr, &d3,
                      (unsigned int)v[6]);
    }
    if (rc)
        arr = NULL;
    slot = push(want == 7 ? &mipmaps : &arrays, (unsigned long long)(size_t)arr, 0, rc == 0);
    out("%s %llu %llu rc=%d slot=%zu handle=%p", op, v[0], v[1], rc, slot, arr);
    return 0;
}

int op_arrdestroy(const struct drv *d, char **f, int nf) {
    const char *op = f[0];
    CUresult rc;
    int mip = !strcmp(op, "mipdestroy");
    struct slot *s;
    NARGS(1);
    s = get_slot(mip ? &mipmaps : &arrays, f[1]);
    if (!s)
        return -1;
    if (mip)
        rc = CALL(d, cuMipmappedArrayDestroy, (CUmipmappedArray)(size_t)s->value);
    else
        rc = CALL(d, cuArrayDestroy, (CUarray)(size_t)s->value);
    if (!rc)
        s->live = 0;
    out("%s %s rc=%d", op, f[1], rc);
    return 0;
}

int op_arrreq(const struct drv *d, char **f, int nf) {
    const char *op = f[0];
    CUresult rc;
    int mip = !strcmp(op, "mipreq");
    CUDA_ARRAY_MEMORY_REQUIREMENTS req;
    struct slot *s;
    NARGS(1);
    s = get_slot(mip ? &mipmaps : &arrays, f[1]);
    if (!s)
        return -1;
    memset(&req, 0, sizeof req);
    if (mip) {
        fn_cuMipmappedArrayGetMemoryRequirements get;
        *(void **)&get = raw_sym(d, "cuMipmappedArrayGetMemoryRequirements");
        rc = get ? get(&req, (CUmipmappedArray)(size_t)s->value, cur_dev)
                 : CUDA_ERROR_NOT_FOUND;
    } else {
        fn_cuArrayGetMemoryRequirements get;
        *(void **)&get = raw_sym(d, "cuArrayGetMemoryRequirements");
        rc = get ? get(&req, (CUarray)(size_t)s->value, cur_dev) : CUDA_ERROR_NOT_FOUND;
    }
    out("%s %s rc=%d size=%zu alignment=%zu", op, f[1], rc, req.size, req.alignment);
    return 0;
}

int op_miplevel(const struct drv *d, char **f, int nf) {
    unsigned long long a = 0;
    CUresult rc;
    fn_cuMipmappedArrayGetLevel get;
    CUarray level = NULL;
    struct slot *s;
    NARGS(2);
    s = get_slot(&mipmaps, f[1]);
    if (!s || parse_num(f[2], &a))
        return -1;
    *(void **)&get = raw_sym(d, "cuMipmappedArrayGetLevel");
    rc = get ? get(&level, (CUmipmappedArray)(size_t)s->value, (unsigned int)a)
             : CUDA_ERROR_NOT_FOUND;
    if (rc)
        level = NULL;
    out("miplevel %s %llu rc=%d slot=%zu", f[1], a, rc,
        push(&arrays, (unsigned long long)(size_t)level, 0, rc == 0));
    return 0;
}
