/* shunt-plan show: one plan, per rank. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "commands.h"
#include "fmt.h"
#include "plan/tuning.h"
#include "plan/parse.h"

static void show_table(const char* label, const struct shunt_plan_table* t) {
  if (!t->n) return;
  printf(" %s[", label);
  for (uint32_t i = 0; i < t->n; i++) printf("%s%u", i ? "," : "", t->ids[i]);
  printf("]");
}

static void show_op(const struct shunt_plan_op* o, const char* indent, uint32_t idx) {
  char buf[128];
  printf("%s%3u %-11s", indent, idx, shunt_op_name(o->type));
  if (o->has_channel_type && o->channel_type != SHUNT_CHAN_NONE)
    printf(" %s", shunt_chan_type_name(o->channel_type));
  if (o->nchannel_ids) {
    printf(" ch=");
    for (uint32_t i = 0; i < o->nchannel_ids; i++) printf("%s%u", i ? "," : "", o->channel_ids[i]);
  }
  if (o->nsrc) {
    printf(" src=");
    for (uint32_t i = 0; i < o->nsrc; i++)
      printf("%s%s", i ? "," : "", fmt_ref(&o->src[i], buf, sizeof(buf)));
  }
  if (o->ndst) {
    printf(" dst=");
    for (uint32_t i = 0; i < o->ndst; i++)
      printf("%s%s", i ? "," : "", fmt_ref(&o->dst[i], buf, sizeof(buf)));
  }
  if (o->has_tbg) printf(" tbg=%u/%u", o->tbg_id, o->tbg_size);
  if (o->has_barrier) printf(" barrier=%u blocks=%u", o->barrier_id, o->num_threadblocks);
  if (o->nsemaphore_ids) {
    printf(" sem=");
    for (uint32_t i = 0; i < o->nsemaphore_ids; i++) printf("%s%u", i ? "," : "", o->semaphore_ids[i]);
  }
  if (o->reduce_op) printf(" reduce=%s", shunt_plan_redop_name(o->reduce_op));
  if (o->type == SHUNT_OP_PIPELINE)
    printf(" unit_size=%s num_chunks=%u", shunt_tuning_format_size(o->unit_size, buf, sizeof(buf)),
           o->num_chunks);
  printf("\n");
  for (uint32_t i = 0; i < o->nops; i++) show_op(&o->ops[i], "          ", i);
}

static void show(const struct shunt_plan* p) {
  char lo[32], hi[32];
  printf("plan %s (%s)\n  collective %s, %u ranks, protocol %s, %s, alignment %u, %u threads/block%s%s\n",
         p->name, p->file, p->collective, p->ngpus, p->protocol, p->inplace ? "in-place" : "out-of-place",
         p->buffer_alignment, p->num_threads_per_block,
         p->use_double_scratch_buffer ? ", double scratch" : "",
         p->reuse_resources ? ", reuse resources" : "");
  printf("  sizes %s..%s bytes%s%s\n", shunt_tuning_format_size(p->min_message_size, lo, sizeof(lo)),
         shunt_tuning_format_size(p->max_message_size, hi, sizeof(hi)),
         p->reduce_op > SHUNT_PLAN_REDOP_SUM ? ", reduce " : "",
         p->reduce_op > SHUNT_PLAN_REDOP_SUM ? shunt_plan_redop_name(p->reduce_op) : "");
  for (uint32_t r = 0; r < p->ngpus; r++) {
    const struct shunt_plan_gpu* g = &p->gpus[r];
    printf("rank %d: chunks input %u, output %u, scratch %u\n", g->id, g->input_chunks, g->output_chunks,
           g->scratch_chunks);
    for (int t = SHUNT_CHAN_MEMORY; t < SHUNT_CHAN_TYPES; t++)
      for (uint32_t i = 0; i < g->nchannels[t]; i++) {
        const struct shunt_plan_channel* ch = &g->channels[t][i];
        if (t == SHUNT_CHAN_SWITCH) {
          printf("  channel %s#%u: buffer %s, ranks", shunt_chan_type_name(ch->type), i,
                 shunt_buf_type_name(ch->buffer_type));
          for (uint32_t k = 0; k < ch->nranks; k++) printf(" %d", ch->ranks[k]);
          printf("\n");
        } else {
          printf("  channel %s#%u -> rank %d (pair #%u)\n", shunt_chan_type_name(ch->type), i, ch->peer,
                 ch->peer_ordinal);
        }
      }
    for (uint32_t i = 0; i < g->nremote_buffers; i++) {
      const struct shunt_plan_remote_buffer* rb = &g->remote_buffers[i];
      printf("  remote buffer rb%u: rank %d %s via%s%s\n", i, rb->rank, shunt_buf_type_name(rb->type),
             (rb->access & (1u << SHUNT_CHAN_MEMORY)) ? " memory" : "",
             (rb->access & (1u << SHUNT_CHAN_PORT)) ? " port" : "");
    }
    for (uint32_t i = 0; i < g->nsemaphores; i++) printf("  semaphore %u: init %d\n", i, g->semaphores[i]);
    for (uint32_t b = 0; b < g->nthreadblocks; b++) {
      const struct shunt_plan_threadblock* tb = &g->threadblocks[b];
      printf("  block %u (%u ops):", tb->id, tb->nops_flat);
      show_table("memory", &tb->channels[SHUNT_CHAN_MEMORY]);
      show_table("port", &tb->channels[SHUNT_CHAN_PORT]);
      show_table("switch", &tb->channels[SHUNT_CHAN_SWITCH]);
      show_table("rb-memory", &tb->remote_refs[SHUNT_CHAN_MEMORY]);
      show_table("rb-port", &tb->remote_refs[SHUNT_CHAN_PORT]);
      printf("\n");
      for (uint32_t i = 0; i < tb->nops; i++) show_op(&tb->ops[i], "    ", i);
    }
  }
}

int cmd_show(int argc, char** argv) {
  if (argc != 1) {
    fprintf(stderr, "usage: shunt-plan show FILE\n");
    return 2;
  }
  struct shunt_plan_errors errs = {0};
  struct shunt_plan* p = shunt_plan_load_file(argv[0], &errs);
  if (!p) {
    char buf[1024];
    for (uint32_t i = 0; i < errs.n; i++)
      fprintf(stderr, "%s\n", shunt_plan_error_format(&errs.v[i], buf, sizeof(buf)));
    shunt_plan_errors_free(&errs);
    return 1;
  }
  show(p);
  shunt_plan_free(p);
  shunt_plan_errors_free(&errs);
  return 0;
}
