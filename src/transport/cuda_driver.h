/* The CUDA driver, when the process has loaded it.
 *
 * Promises: shunt never loads the driver itself (it is looked up with RTLD_NOLOAD), so a
 * process without CUDA gets "not there" answers; it is looked up again only after the process
 * loaded another library, so asking is cheap. Once found, the
 * driver stays (it is never unloaded while the process runs). Safe from any thread. */
#ifndef SHUNT_TRANSPORT_CUDA_DRIVER_H
#define SHUNT_TRANSPORT_CUDA_DRIVER_H

/* The driver's function `name`, or NULL when the driver is not in the process or lacks it. */
void* shunt_driver_sym(const char* name);

/* cuEventRecord(event, stream) in the stream's context (the calling thread may have none, or
 * another): an explicit stream's own; for the default stream (NULL, legacy or per-thread
 * handle), the primary context of `device` (a communicator's), or the current one when device
 * is negative. The thread's context is put back. 0 on success, -1 when the driver is not in the
 * process, else the driver's error code. */
int shunt_driver_event_record(void* event, void* stream, int device);

/* The calling thread's current context (NULL: none, or no driver), and making one current in
 * another thread (ignored without a driver). */
void* shunt_driver_ctx_current(void);
void shunt_driver_ctx_set(void* ctx);

#endif
