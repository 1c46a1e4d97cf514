/*
 * doctor_render.c — stk_doctor_render: a doctor report as text or JSON
 * (`stoker doctor` and `stoker doctor --json`, docs/doctor.md), and the
 * names of its stages and advice kinds.
 *
 * doctor.c measures and fills a stk_doctor_report; this file only prints
 * one. It reads nothing but the report (a plain struct of the public
 * header, tools.h) and knows nothing of how the figures were measured, so
 * the measuring side can change without touching the output. The CLI
 * (cli/cmd_doctor.c) prints either form; the Python binding's doctor()
 * renders the JSON and parses it, so all three say the same. Both forms are
 * an interface: tests/test_doctor.c and tests/python/test_doctor_cli.py
 * check what they print, and scripts read the JSON keys; a change here is a
 * change to docs/doctor.md.
 *
 * The text goes into a growing buffer (sbuf: one malloc'd string, doubled
 * as needed; the first failure sticks in err and later writes do nothing),
 * handed to the caller, who frees it. JSON strings are escaped here
 * (quote, backslash, control characters as \u00XX); a non-finite number
 * is written as null, since JSON has no infinity. No state outside the
 * call: thread-safe.
 */
#include "core/error.h"
#include "stoker/stoker.h"

#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

/* ------------------------------------------------------------------------ */
/* Names                                                                      */
/* ------------------------------------------------------------------------ */

const char *stk_doctor_stage_name(stk_doctor_stage s)
{
    switch (s) {
    case STK_DOCTOR_STORAGE: return "storage";
    case STK_DOCTOR_READ: return "read";
    case STK_DOCTOR_DECODE: return "decode";
    case STK_DOCTOR_AUGMENT: return "augment";
    case STK_DOCTOR_CONSUMER: return "consumer";
    default: return "none";
    }
}

const char *stk_doctor_advice_name(stk_doctor_advice a)
{
    switch (a) {
    case STK_DOCTOR_ADVICE_PACK: return "pack";
    case STK_DOCTOR_ADVICE_RESTART: return "restart";
    case STK_DOCTOR_ADVICE_REENCODE: return "reencode";
    case STK_DOCTOR_ADVICE_CORES: return "cores";
    case STK_DOCTOR_ADVICE_DTYPE: return "dtype";
    case STK_DOCTOR_ADVICE_THREADS: return "threads";
    default: return "none";
    }
}

/* ------------------------------------------------------------------------ */
/* Rendering                                                                  */
/* ------------------------------------------------------------------------ */

typedef struct sbuf {
    char *p;      /* owned (malloc) */
    size_t n, cap;
    int err;
} sbuf;

static void sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void sb_printf(sbuf *b, const char *fmt, ...)
{
    if (b->err)
        return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int k = vsnprintf(b->p ? b->p + b->n : NULL, b->p ? b->cap - b->n : 0, fmt, ap);
        va_end(ap);
        if (k < 0) {
            b->err = STK_EINVAL;
            return;
        }
        if (b->p && b->n + (size_t)k < b->cap) {
            b->n += (size_t)k;
            return;
        }
        size_t cap = b->cap ? b->cap * 2 : 4096;
        while (cap <= b->n + (size_t)k)
            cap *= 2;
        char *q = realloc(b->p, cap);
        if (!q) {
            b->err = STK_ENOMEM;
            return;
        }
        b->p = q;
        b->cap = cap;
    }
}

static void sb_json_string(sbuf *b, const char *s)
{
    sb_printf(b, "\"");
    for (; s && *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            sb_printf(b, "\\%c", c);
        else if (c < 0x20)
            sb_printf(b, "\\u%04x", c);
        else
            sb_printf(b, "%c", c);
    }
    sb_printf(b, "\"");
}

/* A number for JSON: non-finite values are not JSON, so they become null. */
static void sb_num(sbuf *b, const char *key, double v, bool comma)
{
    if (isfinite(v))
        sb_printf(b, "\"%s\": %.6g%s", key, v, comma ? ", " : "");
    else
        sb_printf(b, "\"%s\": null%s", key, comma ? ", " : "");
}

static void render_json(sbuf *b, const stk_doctor_report *r, const char *uri, const char *spec)
{
    sb_printf(b, "{\"dataset\": ");
    sb_json_string(b, uri);
    sb_printf(b, ", \"pipeline\": ");
    sb_json_string(b, spec);
    sb_printf(b, ", \"format\": ");
    sb_json_string(b, r->format);
    sb_printf(b, ", \"dataset_samples\": %llu, \"samples\": %u, \"skipped\": %u, \"readers\": %u, "
                 "\"batch_size\": %u, ",
              (unsigned long long)r->dataset_samples, r->samples, r->skipped, r->readers,
              r->batch_size);
    if (r->first_skipped)
        sb_printf(b, "\"first_skipped\": %llu, ", (unsigned long long)(r->first_skipped - 1));
    else
        sb_printf(b, "\"first_skipped\": null, ");
    sb_num(b, "cpus", r->cpus, true);
    sb_num(b, "open_s", r->open_s, true);
    sb_num(b, "elapsed_s", r->elapsed_s, true);
    sb_num(b, "cpu_share", r->cpu_share, true);
    sb_num(b, "mean_bytes", r->mean_bytes, true);
    sb_printf(b, "\"median_size\": [%u, %u], \"output_size\": [%u, %u], ", r->median_width,
              r->median_height, r->out_width, r->out_height);
    sb_printf(b, "\"stages\": {\"storage\": {");
    sb_num(b, "read_wall_ms", r->read_wall_ms, true);
    sb_num(b, "read_cpu_ms", r->read_cpu_ms, true);
    sb_num(b, "records_per_s", r->read_per_s, true);
    sb_num(b, "mb_per_s", r->read_mb_per_s, true);
    sb_num(b, "ceiling_per_s", r->storage_per_s, true);
    sb_printf(b, "\"cpu_limited\": %s}, ", r->read_cpu_limited ? "true" : "false");
    sb_printf(b, "\"decode\": {");
    sb_num(b, "cpu_ms", r->decode_ms, true);
    sb_num(b, "per_core_per_s", r->decode_ms > 0 ? 1e3 / r->decode_ms : INFINITY, false);
    sb_printf(b, "}, \"augment\": {");
    sb_num(b, "cpu_ms", r->augment_ms, true);
    sb_num(b, "per_core_per_s", r->augment_ms > 0 ? 1e3 / r->augment_ms : INFINITY, false);
    sb_printf(b, "}, \"consumer\": {");
    sb_num(b, "images_per_s", r->consumer_per_s > 0 ? r->consumer_per_s : INFINITY, false);
    sb_printf(b, "}}, ");
    sb_num(b, "per_core_per_s", r->per_core_per_s, true);
    sb_num(b, "images_per_s", r->images_per_s, true);
    sb_printf(b, "\"bottleneck\": \"%s\", \"summary\": ", stk_doctor_stage_name(r->bottleneck));
    sb_json_string(b, r->summary);
    sb_printf(b, ", \"predictions\": [");
    for (uint32_t i = 0; i < r->npredictions; i++) {
        const stk_doctor_prediction *p = &r->predictions[i];
        sb_printf(b, "%s{", i ? ", " : "");
        sb_num(b, "cores", p->cores, true);
        sb_num(b, "images_per_s", p->images_per_s, true);
        sb_printf(b, "\"threads\": %u, \"bottleneck\": \"%s\"}", p->threads,
                  stk_doctor_stage_name(p->bottleneck));
    }
    sb_printf(b, "], \"recommendations\": [");
    for (uint32_t i = 0; i < r->nrecommendations; i++) {
        const stk_doctor_recommendation *x = &r->recommendations[i];
        sb_printf(b, "%s{\"kind\": \"%s\", \"param\": %u, ", i ? ", " : "",
                  stk_doctor_advice_name(x->kind), x->param);
        sb_num(b, "images_per_s", x->images_per_s, true);
        sb_num(b, "gain", x->gain, true);
        sb_printf(b, "\"measured\": %s, \"text\": ", x->measured ? "true" : "false");
        sb_json_string(b, x->text);
        sb_printf(b, "}");
    }
    sb_printf(b, "]}\n");
}

static void render_text(sbuf *b, const stk_doctor_report *r, const char *uri, const char *spec)
{
    sb_printf(b, "dataset   %s (%s, %llu samples; opened in %.2f s)\n", uri, r->format,
              (unsigned long long)r->dataset_samples, r->open_s);
    sb_printf(b, "pipeline  %s -> %ux%u\n", spec, r->out_width, r->out_height);
    sb_printf(b, "sample    %u records in random order (%u skipped), mean %.1f KB", r->samples,
              r->skipped, r->mean_bytes / 1e3);
    if (r->first_skipped)
        sb_printf(b, " [record %llu failed to read or decode: stoker cat %s %llu]",
                  (unsigned long long)(r->first_skipped - 1), uri,
                  (unsigned long long)(r->first_skipped - 1));
    if (r->median_width)
        sb_printf(b, ", median %ux%u", r->median_width, r->median_height);
    sb_printf(b, "; %.3g CPUs available; measured in %.1f s\n\n", r->cpus, r->elapsed_s);
    sb_printf(b, "stage                    per sample            rate\n");
    sb_printf(b, "storage, 1 reader        %8.2f ms wall     %10.0f /s   (%.2f ms CPU)\n",
              r->read_wall_ms, r->read_wall_ms > 0 ? 1e3 / r->read_wall_ms : 0, r->read_cpu_ms);
    sb_printf(b, "storage, %-3u readers                          %10.0f /s   %.1f MB/s\n",
              r->readers, r->read_per_s, r->read_mb_per_s);
    if (isfinite(r->storage_per_s))
        sb_printf(b, "storage ceiling                                %10.0f /s   (readers / wait "
                     "per read%s)\n",
                  r->storage_per_s, r->read_cpu_limited ? "; the readers were CPU-limited" : "");
    else
        sb_printf(b, "storage ceiling          none seen: reads did not wait\n");
    sb_printf(b, "decode                   %8.2f ms CPU      %10.0f /s per core\n", r->decode_ms,
              r->decode_ms > 0 ? 1e3 / r->decode_ms : 0);
    sb_printf(b, "augment                  %8.2f ms CPU      %10.0f /s per core\n", r->augment_ms,
              r->augment_ms > 0 ? 1e3 / r->augment_ms : 0);
    sb_printf(b, "all CPU work             %8.2f ms CPU      %10.0f /s per core\n",
              r->read_cpu_ms + r->decode_ms + r->augment_ms, r->per_core_per_s);
    if (r->consumer_per_s > 0)
        sb_printf(b, "consumer, batch %-5u    %8.1f ms step     %10.0f /s\n", r->batch_size,
                  r->batch_size * 1e3 / r->consumer_per_s, r->consumer_per_s);
    else
        sb_printf(b, "consumer                 not limited (no step time given)\n");
    sb_printf(b, "\n%s\n", r->summary);
    if (r->cpu_share > 0 && r->cpu_share < 0.8)
        sb_printf(b, "note: other processes hold the CPUs: the measuring thread got %.0f%% of a "
                     "core; the figures below assume cores of one's own\n",
                  r->cpu_share * 100);
    sb_printf(b, "\n");
    sb_printf(b, "cores  threads   images/s  limited by\n");
    for (uint32_t i = 0; i < r->npredictions; i++) {
        const stk_doctor_prediction *p = &r->predictions[i];
        sb_printf(b, "%5.3g  %7u  %9.0f  %s\n", p->cores, p->threads, p->images_per_s,
                  stk_doctor_stage_name(p->bottleneck));
    }
    if (!r->nrecommendations) {
        sb_printf(b, "\nnothing measured here would help by 5%% or more\n");
        return;
    }
    sb_printf(b, "\nwhat would help (images/s on %.3g cores, now %.0f):\n", r->cpus,
              r->images_per_s);
    for (uint32_t i = 0; i < r->nrecommendations; i++) {
        const stk_doctor_recommendation *x = &r->recommendations[i];
        sb_printf(b, "  %+5.0f%%  %8.0f/s  %s%s\n", (x->gain - 1) * 100, x->images_per_s,
                  x->text, x->measured ? "" : " [estimate]");
    }
}

int stk_doctor_render(const stk_doctor_report *r, const char *uri, const char *spec, int json,
                      char **out)
{
    if (!r || !out)
        return stk_fail(STK_EINVAL, "stk_doctor_render: report and out are required");
    *out = NULL;
    sbuf b = {0};
    if (json)
        render_json(&b, r, uri ? uri : "", spec ? spec : "");
    else
        render_text(&b, r, uri ? uri : "", spec ? spec : "");
    if (b.err) {
        free(b.p);
        return stk_fail(b.err, "stk_doctor_render: out of memory");
    }
    *out = b.p;
    return 0;
}
