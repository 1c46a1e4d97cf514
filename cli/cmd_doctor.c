/*
 * cmd_doctor.c — `stoker doctor`: a short run that says which stage of the
 * input pipeline limits the images/s (storage, reading, decoding,
 * augmenting, or the training step itself), what to expect with 1..N
 * cores, and what would help most with its predicted gain. A thin wrapper
 * over stk_doctor_run and stk_doctor_render (docs/doctor.md).
 */
#include "args.h"
#include "cli.h"

#include <stoker/stoker.h>

#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static const char doctor_usage[] =
    "usage: stoker doctor DATASET --pipeline SPEC [options]\n"
    "\n"
    "Measure, on a random sample of DATASET and in a few seconds, the storage read rate,\n"
    "the decode and augment time per core and the training step's rate; report the\n"
    "bottleneck, the images/s to expect with 1..N cores (N: the CPUs this process may use),\n"
    "and what would help most, with the predicted gain (docs/doctor.md).\n"
    "\n"
    "options:\n"
    "  -p, --pipeline SPEC    pipeline spec or preset (docs/pipeline.md), required\n"
    "      --step-ms T        the training step's time per batch in ms (default: the\n"
    "                         consumer is not a limit)\n"
    "  -b, --batch N          samples per training step, with --step-ms (256)\n"
    "  -n, --samples N        records sampled (128, at most 4096)\n"
    "      --time S           about how many seconds to measure (5)\n"
    "      --readers N        concurrent readers for the storage rate (8, or twice the cores)\n"
    "      --cores N          predict for 1..N cores (default: the CPUs available)\n"
    "  -s, --seed S           choice of samples and augmentation draws (0)\n"
    "      --json             print one JSON object instead of text\n"
    "  -h, --help             this text\n";

static const struct option doctor_options[] = {
    {"pipeline", required_argument, NULL, 'p'},
    {"step-ms", required_argument, NULL, 'T'},
    {"batch", required_argument, NULL, 'b'},
    {"samples", required_argument, NULL, 'n'},
    {"time", required_argument, NULL, 'B'},
    {"readers", required_argument, NULL, 'R'},
    {"cores", required_argument, NULL, 'C'},
    {"seed", required_argument, NULL, 's'},
    {"json", no_argument, NULL, 'J'},
    {"help", no_argument, NULL, 'h'},
    {NULL, 0, NULL, 0},
};

int cmd_doctor(int argc, char **argv)
{
    const char *pipeline = NULL;
    stk_doctor_options o = {0};
    bool json = false;
    int c;
    cli_getopt_start();
    while ((c = cli_getopt(argc, argv, ":p:b:n:s:h", doctor_options)) != -1) {
        switch (c) {
        case 'p': pipeline = optarg; break;
        case 'T': if (!cli_parse_positive(optarg, "--step-ms", "milliseconds", INFINITY, &o.step_ms)) return EXIT_USAGE; break;
        case 'b': if (!cli_parse_count(optarg, "--batch", &o.batch_size)) return EXIT_USAGE; break;
        case 'n': if (!cli_parse_count_max(optarg, "--samples", 4096, &o.samples)) return EXIT_USAGE; break;
        case 'B': if (!cli_parse_positive(optarg, "--time", "seconds", INFINITY, &o.time_budget_s)) return EXIT_USAGE; break;
        case 'R': if (!cli_parse_count_max(optarg, "--readers", 256, &o.readers)) return EXIT_USAGE; break;
        case 'C': if (!cli_parse_count_max(optarg, "--cores", 1024, &o.max_cores)) return EXIT_USAGE; break;
        case 's': if (!cli_parse_u64(optarg, "--seed", &o.seed)) return EXIT_USAGE; break;
        case 'J': json = true; break;
        case 'h': fputs(doctor_usage, stdout); return 0;
        default: return EXIT_USAGE; /* cli_getopt said why */
        }
    }
    static const char *const names[] = {"DATASET"};
    if (!cli_positionals(argc, argv, optind, "doctor", names, 1))
        return EXIT_USAGE;
    if (!cli_required("doctor", "--pipeline", pipeline))
        return EXIT_USAGE;
    /* A spec that does not parse is a usage error before anything is read. */
    if (stk_spec_validate(pipeline) < 0) {
        cli_error("%s", stk_errmsg());
        return EXIT_USAGE;
    }
    const char *uri = argv[optind];
    if (!json)
        fprintf(stderr, "stoker doctor: measuring %s (a few seconds)...\n", uri);
    stk_doctor_report *r = calloc(1, sizeof *r);
    if (!r) {
        cli_error("out of memory");
        return EXIT_RUNTIME;
    }
    int rc = stk_doctor_run(uri, pipeline, &o, r);
    if (rc < 0) {
        cli_error("%s", stk_errmsg());
        free(r);
        return rc == STK_ESPEC || rc == STK_EINVAL ? EXIT_USAGE : EXIT_RUNTIME;
    }
    char *text = NULL;
    if ((rc = stk_doctor_render(r, uri, pipeline, json, &text)) < 0) {
        cli_error("%s", stk_errmsg());
        free(r);
        return EXIT_RUNTIME;
    }
    fputs(text, stdout);
    stk_free(text);
    free(r);
    return 0;
}
