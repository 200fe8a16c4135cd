/* How shunt exports an NCCL function: pnccl<Name> is the implementation and nccl<Name> a
 * weak alias of it, as in NCCL's own profiling-API builds, so a profiler that defines a
 * strong nccl<Name> and calls pnccl<Name> still reaches shunt. */
#ifndef SHUNT_API_EXPORT_H
#define SHUNT_API_EXPORT_H

#define SHUNT_EXPORT __attribute__((visibility("default")))
#define SHUNT_ALIAS(name, ret, params) \
  SHUNT_EXPORT ret name params __attribute__((weak, alias("p" #name)));

#endif
