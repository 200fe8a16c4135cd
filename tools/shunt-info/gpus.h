/* shunt-info's report of the GPUs (gpus.c). */
#ifndef SHUNT_INFO_GPUS_H
#define SHUNT_INFO_GPUS_H

/* Prints the CUDA driver's version, each GPU, peer access and MPS, or why there are none. */
void shunt_info_gpus(void);

#endif
