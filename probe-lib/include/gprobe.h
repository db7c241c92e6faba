/*
 * gprobe.h: gsched's probe API (libgprobe.so).
 *
 * A GPU task reports its memory and warps before it starts; gnoded places
 * it on a GPU instance with room and the call returns once it is placed
 * (it may wait for memory to be released). The first placement of a
 * process decides its instance: it sets CUDA_VISIBLE_DEVICES (and
 * CUDA_MPS_PIPE_DIRECTORY) in the environment, so call it before the
 * process creates its CUDA context. Later tasks stay on that instance.
 *
 * Inside a gsched job the library finds gnoded through GSCHED_PROBE_SOCK,
 * GSCHED_JOB_ID and GSCHED_JOB_KEY. Errors are negative codes; see
 * gprobe_last_error() for a message.
 *
 * Link: cc prog.c -lgprobe   (or dlopen("libgprobe.so", ...))
 */
#ifndef GPROBE_H
#define GPROBE_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define GPROBE_ERR_PROTOCOL    (-1) /* malformed request or reply */
#define GPROBE_ERR_AUTH        (-2) /* wrong job key, unknown job, foreign uid */
#define GPROBE_ERR_NEVER_FITS  (-3) /* bigger than every instance it may use */
#define GPROBE_ERR_FULL        (-4) /* no room to grow a reservation */
#define GPROBE_ERR_NO_TASK     (-5) /* no such task of this job */
#define GPROBE_ERR_UNAVAILABLE (-6) /* not in a gsched job, or gnoded unreachable */

/* Connects to gnoded. 0 or a negative error code. */
int gprobe_init(void);

/* Places a task needing mem_bytes of GPU memory and warps warps; blocks
 * until placed. Returns a task handle (> 0) or a negative error code. */
int64_t gprobe_task_begin(uint64_t mem_bytes, uint64_t warps);

/* gprobe_task_begin for a task whose kernel launches `blocks` thread blocks
 * of `threads_per_block` threads: placement policies that emulate SM slots
 * (mgb-sm) use the shape. */
int64_t gprobe_task_begin_kernel(uint64_t mem_bytes, uint64_t blocks,
                                 uint64_t threads_per_block);

/* Ends a task, releasing its reservation. 0 or a negative error code. */
int gprobe_task_end(int64_t handle);

/* Closes the connection. Reservations still held are released when the
 * process exits. Returns 0. */
int gprobe_destroy(void);

/* The message of the last error in this process ("" if none). */
const char *gprobe_last_error(void);

/* The CASE papers' names for the same calls. */
int case_init(void);
int64_t case_task_begin(uint64_t mem_bytes, uint64_t warps);
int case_task_end(int64_t handle);
int case_destroy(void);

#ifdef __cplusplus
}
#endif

#endif /* GPROBE_H */
