/* glibc_compat.c — arc4random for the wheel's statically linked LLVM.
 *
 * Debian's LLVM 19 draws random numbers (sys::Process::GetRandomNumber)
 * from arc4random, new in glibc 2.36. The wheel links LLVM with
 * -Wl,--wrap=arc4random (setup.py, SMELT_WHEEL=1), so LLVM calls this
 * instead, built on getrandom (glibc 2.25): the wheel then runs on glibc
 * 2.35 (Ubuntu 22.04) too. Unreferenced in the other builds.
 */
#include <stdint.h>
#include <sys/random.h>

uint32_t __wrap_arc4random(void);

uint32_t __wrap_arc4random(void)
{
    uint32_t v;
    while (getrandom(&v, sizeof v, 0) != (ssize_t)sizeof v)
        ;   /* EINTR only: getrandom blocks until the pool is initialised */
    return v;
}
