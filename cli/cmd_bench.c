/*
 * cmd_bench.c — `stoker bench` and `stoker demo`: run a pipeline flat out
 * and report what it costs.
 *
 * The consumer does nothing with a batch but (optionally) hash it, so the
 * figures are the loader's ceiling. Elapsed time runs from before the loader
 * is created (thread start-up and first fill included) to the last batch.
 * Stage times come from stk_loader_stats: worker seconds summed over
 * threads (read, decode, augment, idle) and the consumer's wait in next();
 * the data-stall profile (stk_loader_profile_get) gives the data share and
 * the verdict, which matter with --step-ms (a simulated training step).
 *
 * --digest: one XXH3-128 hash over every batch in delivery order — for each
 * batch, its data bytes (size * sample_bytes) then its labels as int64
 * little-endian — printed as "digest: <32 hex digits>". The same seed gives
 * the same digest for any thread count (tests/cli_smoke.cmake and
 * tests/python/test_cli.py check it).
 *
 * --device cuda:N [--placement auto|cpu|gpu]: batches delivered in CUDA
 * memory (docs/gpu.md). The consumer still does nothing with them on the
 * device; the report says where they arrived. --digest reads the batch on
 * the host, so it needs host batches (an emulated device's are:
 * STOKER_CUDA_EMULATE=1); a real device batch with --digest is an error.
 */
#include "args.h"
#include "cli.h"

#include <stoker/stoker.h>

#include <getopt.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <xxhash.h>

#define DEMO_DATASET "fashion-mnist:/usr/share/datasets/fashion-mnist"
#define DEMO_PIPELINE "pad 2 | random_crop 28 | flip 0.5 | normalize fashion-mnist | to f32 chw"

static const char bench_usage[] =
    "usage: stoker bench DATASET --pipeline SPEC [options]\n"
    "\n"
    "Run the pipeline over DATASET as fast as possible and report samples/s, MB/s,\n"
    "the per-stage time breakdown and peak RSS.\n"
    "\n"
    "options:\n"
    "  -p, --pipeline SPEC    pipeline spec (docs/pipeline.md), required\n"
    "  -b, --batch N          batch size (256)\n"
    "  -t, --threads N|auto   worker threads (auto: the autotuner, docs/engine.md)\n"
    "      --prefetch N|auto  batches filled ahead (auto)\n"
    "      --memory-limit B   bytes for the batch pool and scratch (suffix k, M, G)\n"
    "      --fields LIST      fields each batch delivers (image,label,mask,boxes,...;\n"
    "                         docs/fields.md); --digest then hashes every field\n"
    "      --step-ms T        simulate a training step: sleep T ms per batch\n"
    "  -e, --epochs N         epochs to run (1)\n"
    "  -s, --seed S           shuffle/augmentation seed (0)\n"
    "      --rank R           this rank (0)\n"
    "      --world-size W     number of ranks (1)\n"
    "      --no-shuffle       keep dataset order (as --shuffle none)\n"
    "      --shuffle MODE     global (default), block or none (docs/sampler.md)\n"
    "      --block-size N     --shuffle block: records per block (64)\n"
    "      --shuffle-window K --shuffle block: blocks mixed together (16)\n"
    "      --drop-last        drop each rank's last incomplete batch\n"
    "      --indices FILE     only these dataset indices (a subset, permuted)\n"
    "      --weights FILE     one weight per sample: draws with replacement\n"
    "      --balance-classes  weights 1/class count, from the dataset's labels\n"
    "      --num-samples N    samples per epoch (default: the dataset or subset)\n"
    "      --aug-seed S       seed of the augmentations (default: --seed)\n"
    "      --views K          K augmented views of each sample per batch (1)\n"
    "      --device DEV       deliver batches on DEV: cpu (default) or cuda:N\n"
    "      --placement P      with --device cuda:N: gpu (augment on the GPU), cpu\n"
    "                         (augment on the CPU, copy) or auto (default)\n"
    "      --decoder D        with --device cuda:N: who decodes JPEGs: cpu (default,\n"
    "                         libjpeg-turbo) or nvjpeg (on the GPU; needs libnvjpeg)\n"
    "      --on-error POLICY  raise (default), skip corrupt samples, or replace them\n"
    "                         (full batches: another sample of the epoch instead)\n"
    "      --digest           print 'digest: HEX', a hash of every batch and label\n"
    "      --json             print one JSON object instead of text\n"
    "  -h, --help             this text\n";

static const char demo_usage[] =
    "usage: stoker demo [--threads N] [--epochs N] [--json]\n"
    "\n"
    "Fashion-MNIST from Debian's dataset-fashion-mnist package\n"
    "(" DEMO_DATASET ")\n"
    "through '" DEMO_PIPELINE "',\n"
    "batch 256, printing throughput. Same options as 'stoker bench'.\n";

typedef struct bench_args {
    const char *dataset;
    const char *pipeline;
    stk_loader_options opt;
    stk_sampling sampling; /* arrays owned, freed by cli_sampling_free */
    uint64_t epochs;
    double step_ms; /* --step-ms: the consumer sleeps this long per batch */
    const char *device; /* --device (NULL: host memory) */
    stk_placement placement; /* --placement */
    bool placement_set;
    stk_decoder decoder;     /* --decoder */
    bool decoder_set;
    bool digest, json;
} bench_args;

/* The named values of --placement, --decoder and --on-error, and what each
 * stands for (cli_parse_choice gives the position). */
static const char *const placement_name[] = {"auto", "cpu", "gpu"};
static const stk_placement placement_value[] = {STK_PLACE_AUTO, STK_PLACE_CPU, STK_PLACE_GPU};
static const char *const decoder_name[] = {"cpu", "nvjpeg"};
static const stk_decoder decoder_value[] = {STK_DECODER_CPU, STK_DECODER_NVJPEG};
static const char *const on_error_name[] = {"raise", "skip", "replace"};
static const stk_error_policy on_error_value[] = {STK_ON_ERROR_RAISE, STK_ON_ERROR_SKIP,
                                                  STK_ON_ERROR_REPLACE};

static const char *dtype_name(stk_dtype d)
{
    return d == STK_U8 ? "u8" : d == STK_F16 ? "f16" : d == STK_BF16 ? "bf16" : "f32";
}

static void json_string(const char *s)
{
    putchar('"');
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            printf("\\%c", c);
        else if (c < 0x20)
            printf("\\u%04x", c);
        else
            putchar(c);
    }
    putchar('"');
}

static int run_bench(const bench_args *a)
{
    int status = EXIT_RUNTIME, rc;
    stk_dataset *ds = NULL;
    stk_loader *l = NULL;
    XXH3_state_t *hash = NULL;

    /* Where the batches are delivered (the loader copies these at create). */
    stk_loader_options opt = a->opt;
    stk_device_options dev = {.device = a->device, .placement = a->placement,
                              .decoder = a->decoder};
    if (a->device)
        opt.device = &dev;
    int32_t got_type = 0, got_id = 0; /* where the batches arrived (the last one) */

    struct timespec ts0, ts1;
    clock_gettime(CLOCK_MONOTONIC, &ts0);

    if ((rc = stk_dataset_open(a->dataset, NULL, &ds)) < 0) {
        cli_error("%s", stk_errmsg());
        goto done;
    }
    if ((rc = stk_loader_create(ds, a->pipeline, &opt, &l)) < 0) {
        cli_error("%s", stk_errmsg());
        /* A bad spec, or options the loader refuses (--threads over its
         * limit, --rank/--world-size/--drop-last leaving nothing): usage. */
        status = rc == STK_ESPEC || rc == STK_EINVAL ? EXIT_USAGE : EXIT_RUNTIME;
        goto done;
    }
    if (a->digest) {
        hash = XXH3_createState();
        if (!hash || XXH3_128bits_reset(hash) != XXH_OK) {
            cli_error("out of memory");
            goto done;
        }
    }

    uint64_t samples = 0, batches = 0, bytes = 0, skipped = 0;
    for (uint64_t e = 0; e < a->epochs; e++) {
        stk_loader_set_epoch(l, e);
        stk_batch b;
        while ((rc = stk_loader_next(l, &b)) == 1) {
            samples += b.size;
            skipped += b.skipped; /* stats would also count prefetched batches */
            batches++;
            bytes += (uint64_t)b.size * b.sample_bytes;
            got_type = b.device_type;
            got_id = b.device_id;
            if (hash && b.device_type == STK_DEVICE_CUDA) {
                cli_error("--digest reads batches on the host, but this one is in CUDA memory "
                          "(cuda:%d); digest an emulated device (STOKER_CUDA_EMULATE=1) or use "
                          "the Python module",
                          (int)b.device_id);
                stk_loader_release(l, &b);
                goto done;
            }
            if (hash) {
                XXH3_128bits_update(hash, b.data, (size_t)b.size * b.sample_bytes);
                for (uint32_t i = 0; i < b.size; i++) {
                    uint8_t le[8];
                    uint64_t v = (uint64_t)b.labels[i];
                    for (int k = 0; k < 8; k++)
                        le[k] = (uint8_t)(v >> (8 * k));
                    XXH3_128bits_update(hash, le, sizeof le);
                }
                /* fields beyond image and label: values, then offsets */
                uint32_t nf = stk_loader_field_count(l);
                for (uint32_t f = 0; a->opt.fields && f < nf; f++) {
                    stk_batch_field bf;
                    if (stk_loader_field(l, &b, f, &bf) < 0 || bf.role == STK_ROLE_IMAGE ||
                        bf.role == STK_ROLE_LABEL)
                        continue;
                    if (bf.bytes)
                        XXH3_128bits_update(hash, bf.data, bf.bytes);
                    if (bf.offsets)
                        XXH3_128bits_update(hash, bf.offsets, ((size_t)b.size + 1) * 8);
                }
            }
            stk_loader_release(l, &b);
            if (a->step_ms > 0) {
                struct timespec nap = {(time_t)(a->step_ms / 1000),
                                       (long)(fmod(a->step_ms, 1000.0) * 1e6)};
                nanosleep(&nap, NULL);
            }
        }
        if (rc < 0) {
            cli_error("%s", stk_errmsg());
            goto done;
        }
    }
    clock_gettime(CLOCK_MONOTONIC, &ts1);
    double elapsed = (double)(ts1.tv_sec - ts0.tv_sec) + (double)(ts1.tv_nsec - ts0.tv_nsec) * 1e-9;

    stk_loader_stats st;
    stk_loader_stats_get(l, &st);
    char device_info[1300];
    snprintf(device_info, sizeof device_info, "%s", stk_loader_device_info(l));
    stk_io_stats io; /* a remote dataset's traffic (zero for local files) */
    stk_io_stats_get(&io);
    stk_jpeg_index_stats jx; /* the JPEG sync index (docs/codec.md) */
    stk_jpeg_index_stats_get(&jx);
    stk_loader_profile prof;
    stk_loader_profile_get(l, &prof);
    stk_dataset_info info;
    stk_dataset_info_get(ds, &info);
    int64_t shape[3];
    stk_dtype dtype;
    stk_layout layout;
    size_t sample_bytes;
    stk_loader_sample_shape(l, shape, &dtype, &layout, &sample_bytes);
    double sps = samples / elapsed, mbps = (double)bytes / elapsed / 1e6;
    double rss = cli_peak_rss_mb();
    char digest[33] = "";
    if (hash) {
        XXH128_hash_t h = XXH3_128bits_digest(hash);
        snprintf(digest, sizeof digest, "%016llx%016llx", (unsigned long long)h.high64,
                 (unsigned long long)h.low64);
    }

    char where[32] = "host";
    if (got_type == STK_DEVICE_CUDA)
        snprintf(where, sizeof where, "cuda:%d", (int)got_id);

    if (a->json) {
        printf("{\"dataset\": ");
        json_string(a->dataset);
        printf(", \"device\": ");
        json_string(a->device ? a->device : "cpu");
        if (a->device) {
            printf(", \"placement\": \"%s\", \"decoder\": \"%s\", \"delivered\": \"%s\", "
                   "\"gpu_head_rows\": %llu, \"gpu_decode_cpu_rows\": %u, \"device_info\": ",
                   placement_name[a->placement], decoder_name[a->decoder], where,
                   (unsigned long long)st.gpu_head_rows, st.gpu_decode_cpu_rows);
            json_string(device_info);
        }
        printf(", \"pipeline\": ");
        json_string(a->pipeline);
        printf(", \"samples\": %llu, \"batches\": %llu, \"epochs\": %llu, \"batch_size\": %u, "
               "\"threads\": %u, \"prefetch\": %u, \"elapsed_s\": %.6f, \"samples_per_s\": %.1f, "
               "\"mb_per_s\": %.3f, \"sample_bytes\": %zu, \"dtype\": \"%s\", \"layout\": \"%s\", "
               "\"peak_rss_mb\": %.2f, \"skipped\": %llu, \"stages\": {\"read_s\": %.6f, "
               "\"decode_s\": %.6f, \"augment_s\": %.6f, \"collate_s\": %.6f, "
               "\"worker_idle_s\": %.6f, \"consumer_wait_s\": %.6f, \"consumer_step_s\": %.6f}, "
               "\"auto_threads\": %s, \"auto_prefetch\": %s, \"decisions\": %llu, "
               "\"memory_bytes\": %llu, \"data_share\": %.6f, \"verdict\": ",
               (unsigned long long)samples, (unsigned long long)batches,
               (unsigned long long)a->epochs, a->opt.batch_size ? a->opt.batch_size : 256,
               st.threads, st.prefetch, elapsed, sps, mbps, sample_bytes, dtype_name(dtype),
               layout == STK_CHW ? "chw" : "hwc", rss, (unsigned long long)skipped, st.read_s,
               st.decode_s, st.augment_s, st.collate_s, st.idle_s, st.wait_s, st.step_s,
               a->opt.threads ? "false" : "true", a->opt.prefetch ? "false" : "true",
               (unsigned long long)st.decisions, (unsigned long long)st.memory_bytes,
               prof.data_share);
        json_string(prof.verdict);
        if (io.reads)
            printf(", \"remote\": {\"bytes_fetched\": %llu, \"bytes_received\": %llu, "
                   "\"requests\": %llu, \"retries\": %llu, \"failures\": %llu, "
                   "\"reads\": %llu, \"reads_waited\": %llu, \"cache_hit_bytes\": %llu, "
                   "\"network_wait_s\": %.6f}",
                   (unsigned long long)io.bytes_fetched, (unsigned long long)io.bytes_received,
                   (unsigned long long)io.requests, (unsigned long long)io.retries,
                   (unsigned long long)io.failures, (unsigned long long)io.reads,
                   (unsigned long long)io.reads_waited, (unsigned long long)io.cache_hit_bytes,
                   io.wait_s);
        if (jx.files)
            printf(", \"jpeg_index\": {\"files\": %llu, \"windows\": %llu, \"declined\": %llu, "
                   "\"bytes\": %llu}",
                   (unsigned long long)jx.files, (unsigned long long)jx.windows,
                   (unsigned long long)jx.declined, (unsigned long long)jx.bytes);
        if (hash)
            printf(", \"digest\": \"%s\"", digest);
        printf("}\n");
    } else {
        /* Encoded or variously sized images have no one shape (0x0x0). */
        if (info.height && info.width)
            printf("stoker bench: %s (%llu samples, %ux%ux%u)\n", a->dataset,
                   (unsigned long long)info.count, info.height, info.width, info.channels);
        else
            printf("stoker bench: %s (%llu samples, variable size)\n", a->dataset,
                   (unsigned long long)info.count);
        printf("  pipeline:   %s\n", a->pipeline);
        printf("  output:     %lldx%lldx%lld %s %s, %zu bytes/sample\n", (long long)shape[0],
               (long long)shape[1], (long long)shape[2], dtype_name(dtype),
               layout == STK_CHW ? "chw" : "hwc", sample_bytes);
        printf("  ran:        %llu samples in %llu batches over %llu epoch(s), %u threads%s, "
               "prefetch %u%s\n",
               (unsigned long long)samples, (unsigned long long)batches,
               (unsigned long long)a->epochs, st.threads, a->opt.threads ? "" : " (auto)",
               st.prefetch, a->opt.prefetch ? "" : " (auto)");
        if (a->device)
            printf("  device:     %s, placement %s, decoder %s; batches delivered in %s memory"
                   "%s\n",
                   a->device, placement_name[a->placement], decoder_name[a->decoder], where,
                   a->decoder == STK_DECODER_NVJPEG && st.gpu_decode_cpu_rows
                       ? " (some JPEGs decoded on the CPU: stats gpu_decode_cpu_rows)"
                       : "");
        if (a->device)
            printf("  on device:  %s\n", device_info);
        printf("  throughput: %.0f samples/s, %.1f MB/s (%.3f s)\n", sps, mbps, elapsed);
        printf("  stages:     read %.3f s, decode %.3f s, augment %.3f s, worker idle %.3f s "
               "(summed over threads); consumer wait %.3f s, step %.3f s\n",
               st.read_s, st.decode_s, st.augment_s, st.idle_s, st.wait_s, st.step_s);
        printf("  profile:    %s\n", prof.verdict);
        if (skipped)
            printf("  skipped:    %llu corrupt samples\n", (unsigned long long)skipped);
        if (io.reads)
            printf("  remote:     %.1f MB fetched in %llu requests (%llu retries, %llu failed); "
                   "cache hits %.1f%% of %llu reads; network wait %.3f s = %.0f%% of read "
                   "time\n",
                   (double)io.bytes_fetched / 1e6, (unsigned long long)io.requests,
                   (unsigned long long)io.retries, (unsigned long long)io.failures,
                   100.0 * (double)(io.reads - io.reads_waited) / (double)io.reads,
                   (unsigned long long)io.reads, io.wait_s,
                   st.read_s > 0 ? 100.0 * (io.wait_s < st.read_s ? io.wait_s : st.read_s) / st.read_s
                                 : 0.0);
        if (jx.files)
            printf("  jpeg index: %llu files (%.1f MB), %llu crops from sync windows, %llu "
                   "declined\n",
                   (unsigned long long)jx.files, (double)jx.bytes / 1e6,
                   (unsigned long long)jx.windows, (unsigned long long)jx.declined);
        printf("  peak RSS:   %.1f MB\n", rss);
        if (hash)
            printf("digest: %s\n", digest);
    }
    status = 0;

done:
    XXH3_freeState(hash);
    stk_loader_destroy(l);
    stk_dataset_close(ds);
    return status;
}

enum { OPT_PREFETCH = 256, OPT_RANK, OPT_WORLD, OPT_NO_SHUFFLE, OPT_DROP_LAST, OPT_DIGEST,
       OPT_JSON, OPT_ON_ERROR, OPT_SHUFFLE, OPT_BLOCK_SIZE, OPT_WINDOW, OPT_INDICES,
       OPT_WEIGHTS, OPT_BALANCE, OPT_NUM_SAMPLES, OPT_AUG_SEED, OPT_VIEWS, OPT_MEMORY, OPT_FIELDS,
       OPT_STEP, OPT_DEVICE, OPT_PLACEMENT, OPT_DECODER };

static const struct option bench_options[] = {
    {"pipeline", required_argument, NULL, 'p'},
    {"batch", required_argument, NULL, 'b'},
    {"threads", required_argument, NULL, 't'},
    {"prefetch", required_argument, NULL, OPT_PREFETCH},
    {"memory-limit", required_argument, NULL, OPT_MEMORY},
    {"fields", required_argument, NULL, OPT_FIELDS},
    {"step-ms", required_argument, NULL, OPT_STEP},
    {"epochs", required_argument, NULL, 'e'},
    {"seed", required_argument, NULL, 's'},
    {"rank", required_argument, NULL, OPT_RANK},
    {"world-size", required_argument, NULL, OPT_WORLD},
    {"no-shuffle", no_argument, NULL, OPT_NO_SHUFFLE},
    {"drop-last", no_argument, NULL, OPT_DROP_LAST},
    {"shuffle", required_argument, NULL, OPT_SHUFFLE},
    {"block-size", required_argument, NULL, OPT_BLOCK_SIZE},
    {"shuffle-window", required_argument, NULL, OPT_WINDOW},
    {"on-error", required_argument, NULL, OPT_ON_ERROR},
    {"indices", required_argument, NULL, OPT_INDICES},
    {"weights", required_argument, NULL, OPT_WEIGHTS},
    {"balance-classes", no_argument, NULL, OPT_BALANCE},
    {"num-samples", required_argument, NULL, OPT_NUM_SAMPLES},
    {"aug-seed", required_argument, NULL, OPT_AUG_SEED},
    {"views", required_argument, NULL, OPT_VIEWS},
    {"device", required_argument, NULL, OPT_DEVICE},
    {"placement", required_argument, NULL, OPT_PLACEMENT},
    {"decoder", required_argument, NULL, OPT_DECODER},
    {"digest", no_argument, NULL, OPT_DIGEST},
    {"json", no_argument, NULL, OPT_JSON},
    {"help", no_argument, NULL, 'h'},
    {NULL, 0, NULL, 0},
};

/* Parse bench/demo options; returns -1 to go on, else an exit status. */
static int parse_bench(int argc, char **argv, bench_args *a, const char *usage)
{
    cli_getopt_start();
    int c, choice;
    while ((c = cli_getopt(argc, argv, ":p:b:t:e:s:h", bench_options)) != -1) {
        switch (c) {
        case 'p': a->pipeline = optarg; break;
        case 'b': if (!cli_parse_count(optarg, "--batch", &a->opt.batch_size)) return EXIT_USAGE; break;
        case 't': if (!cli_parse_count_or_auto(optarg, "--threads", &a->opt.threads)) return EXIT_USAGE; break;
        case OPT_PREFETCH: if (!cli_parse_count_or_auto(optarg, "--prefetch", &a->opt.prefetch)) return EXIT_USAGE; break;
        case OPT_FIELDS: a->opt.fields = optarg; break;
        case OPT_MEMORY: if (!cli_parse_bytes(optarg, "--memory-limit", 1, &a->opt.memory_limit)) return EXIT_USAGE; break;
        case OPT_STEP: if (!cli_parse_positive(optarg, "--step-ms", "milliseconds", 3.6e6, &a->step_ms)) return EXIT_USAGE; break;
        case 'e': if (!cli_parse_count64(optarg, "--epochs", &a->epochs)) return EXIT_USAGE; break;
        case 's': if (!cli_parse_u64(optarg, "--seed", &a->opt.seed)) return EXIT_USAGE; break;
        case OPT_RANK: if (!cli_parse_u32(optarg, "--rank", &a->opt.rank)) return EXIT_USAGE; break;
        case OPT_WORLD: if (!cli_parse_count(optarg, "--world-size", &a->opt.world_size)) return EXIT_USAGE; break;
        case OPT_NO_SHUFFLE: a->opt.no_shuffle = 1; break;
        case OPT_DROP_LAST: a->opt.drop_last = 1; break;
        case OPT_SHUFFLE: if (!cli_parse_shuffle(optarg, &a->opt.shuffle)) return EXIT_USAGE; break;
        case OPT_BLOCK_SIZE: {
            uint32_t v;
            if (!cli_parse_count(optarg, "--block-size", &v)) return EXIT_USAGE;
            a->opt.block_size = v;
            break;
        }
        case OPT_WINDOW: if (!cli_parse_count(optarg, "--shuffle-window", &a->opt.shuffle_window)) return EXIT_USAGE; break;
        case OPT_INDICES: if (!cli_read_indices(optarg, &a->sampling)) return EXIT_USAGE; break;
        case OPT_WEIGHTS: if (!cli_read_weights(optarg, &a->sampling)) return EXIT_USAGE; break;
        case OPT_BALANCE: a->sampling.balance_classes = 1; break;
        case OPT_NUM_SAMPLES: if (!cli_parse_u64(optarg, "--num-samples", &a->sampling.num_samples)) return EXIT_USAGE; break;
        case OPT_AUG_SEED:
            if (!cli_parse_u64(optarg, "--aug-seed", &a->opt.aug_seed)) return EXIT_USAGE;
            a->opt.flags |= STK_LOADER_AUG_SEED;
            break;
        case OPT_VIEWS: if (!cli_parse_count(optarg, "--views", &a->opt.views)) return EXIT_USAGE; break;
        case OPT_DEVICE:
            /* "cpu" (or "") is host memory; the loader checks "cuda[:N]" */
            a->device = !strcmp(optarg, "cpu") || !*optarg ? NULL : optarg;
            break;
        case OPT_PLACEMENT:
            if (!cli_parse_choice(optarg, "--placement", placement_name, 3, &choice)) return EXIT_USAGE;
            a->placement = placement_value[choice];
            a->placement_set = true;
            break;
        case OPT_DECODER:
            if (!cli_parse_choice(optarg, "--decoder", decoder_name, 2, &choice)) return EXIT_USAGE;
            a->decoder = decoder_value[choice];
            a->decoder_set = true;
            break;
        case OPT_DIGEST: a->digest = true; break;
        case OPT_JSON: a->json = true; break;
        case OPT_ON_ERROR:
            if (!cli_parse_choice(optarg, "--on-error", on_error_name, 3, &choice)) return EXIT_USAGE;
            a->opt.on_error = on_error_value[choice];
            break;
        case 'h': fputs(usage, stdout); return 0;
        default: return EXIT_USAGE; /* cli_getopt said why */
        }
    }
    if (!cli_check_order(a->opt.no_shuffle, a->opt.shuffle, a->opt.block_size,
                         a->opt.shuffle_window))
        return EXIT_USAGE;
    if (a->opt.world_size && a->opt.rank >= a->opt.world_size) {
        cli_error("--rank %u must be below --world-size %u", a->opt.rank, a->opt.world_size);
        return EXIT_USAGE;
    }
    if (a->placement_set && !a->device) {
        cli_error("--placement needs --device cuda:N (it says what the GPU does)");
        return EXIT_USAGE;
    }
    if (a->decoder_set && !a->device) {
        cli_error("--decoder needs --device cuda:N (nvjpeg decodes on the GPU)");
        return EXIT_USAGE;
    }
    if (cli_sampling_set(&a->sampling))
        a->opt.sampling = &a->sampling;
    return -1;
}

static int bench_main(int argc, char **argv, bench_args *ap)
{
    bench_args a = *ap; /* the sampling arrays stay owned by *ap */
    int status = parse_bench(argc, argv, &a, bench_usage);
    ap->sampling = a.sampling;
    if (a.opt.sampling)
        a.opt.sampling = &ap->sampling;
    if (status >= 0)
        return status;
    static const char *const names[] = {"DATASET"};
    if (!cli_positionals(argc, argv, optind, "bench", names, 1))
        return EXIT_USAGE;
    a.dataset = argv[optind];
    if (!cli_required("bench", "--pipeline", a.pipeline))
        return EXIT_USAGE;
    return run_bench(&a);
}

int cmd_bench(int argc, char **argv)
{
    bench_args a = {.epochs = 1};
    int status = bench_main(argc, argv, &a);
    cli_sampling_free(&a.sampling);
    return status;
}

static int demo_main(int argc, char **argv, bench_args *ap)
{
    bench_args a = *ap;
    int status = parse_bench(argc, argv, &a, demo_usage);
    ap->sampling = a.sampling;
    if (a.opt.sampling)
        a.opt.sampling = &ap->sampling;
    if (status >= 0)
        return status;
    if (!cli_positionals(argc, argv, optind, "demo", NULL, 0))
        return EXIT_USAGE;
    if (!a.json)
        printf("stoker %s demo: Fashion-MNIST, %llu epochs\n", stk_version_string(),
               (unsigned long long)a.epochs);
    return run_bench(&a);
}

int cmd_demo(int argc, char **argv)
{
    bench_args a = {.epochs = 3, .dataset = DEMO_DATASET, .pipeline = DEMO_PIPELINE};
    int status = demo_main(argc, argv, &a);
    cli_sampling_free(&a.sampling);
    return status;
}
