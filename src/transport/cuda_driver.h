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

/* cuEventRecord(event, stream): 0 on success, -1 when the driver is not in the process, else
 * the driver's error code. */
int shunt_driver_event_record(void* event, void* stream);

#endif
