/* The checks of the shim's C test programs: a failed one is printed with its place and
 * counted in `failures` (each program defines it; main exits 1 when any failed). */
#ifndef CUQUOTA_SHIM_CHECK_H
#define CUQUOTA_SHIM_CHECK_H

#include <stddef.h>
#include <stdio.h>

extern int failures;
#define CHECK(cond)                                                                  \
    do {                                                                             \
        if (!(cond)) {                                                               \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
            failures++;                                                              \
        }                                                                            \
    } while (0)
#define OK(call) CHECK((call) == 0)

static const size_t MiB = 1ull << 20, GiB = 1ull << 30;

#endif
