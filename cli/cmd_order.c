/*
 * cmd_order.c — `stoker order`: print the sample indices one rank sees in an
 * epoch, in delivery order, one per line. Uses the same public sampler as
 * the loader, so it is the loader's order.
 */
#include "args.h"
#include "cli.h"

#include <stoker/stoker.h>

#include <ctype.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char order_usage[] =
    "usage: stoker order DATASET-or-SIZE [--seed S] [--epoch E] [--rank R --world-size W]\n"
    "                    [--no-shuffle | --shuffle global|block|none [--block-size N]\n"
    "                    [--shuffle-window K]] [--batch N --drop-last] [--start-slot S]\n"
    "                    [--indices FILE] [--weights FILE | --balance-classes]\n"
    "                    [--num-samples N] [--mix-sizes A,B,... [--mix-weights X,Y,...]]\n"
    "\n"
    "Print the dataset indices rank R sees in epoch E, in order, one per line.\n"
    "The first argument is a dataset URI or a plain sample count.\n"
    "With --drop-last the share is cut to whole batches of N (default 1).\n"
    "--shuffle block: blocks of N consecutive indices (64) in a random order,\n"
    "mixed within windows of K blocks (16). --start-slot S: the rest of an epoch\n"
    "from global slot S, as a job resumed on another world size reads it.\n"
    "--indices FILE: only these dataset indices (white-space separated), permuted\n"
    "each epoch. --weights FILE: one weight per sample (of --indices if given),\n"
    "drawn with replacement; --balance-classes: weights 1/class count from the\n"
    "dataset's labels (needs a DATASET). --num-samples N: entries per epoch.\n"
    "--mix-sizes: the sources of a mix (consecutive parts of the dataset, summing\n"
    "to its size), in the proportions --mix-weights (default: the sizes).\n";

enum { OPT_RANK = 256, OPT_WORLD, OPT_NO_SHUFFLE, OPT_DROP_LAST, OPT_SHUFFLE, OPT_BLOCK_SIZE,
       OPT_WINDOW, OPT_START_SLOT, OPT_INDICES, OPT_WEIGHTS, OPT_NUM_SAMPLES, OPT_BALANCE,
       OPT_MIX_SIZES, OPT_MIX_WEIGHTS };

static const struct option order_options[] = {
    {"seed", required_argument, NULL, 's'},
    {"epoch", required_argument, NULL, 'e'},
    {"rank", required_argument, NULL, OPT_RANK},
    {"world-size", required_argument, NULL, OPT_WORLD},
    {"no-shuffle", no_argument, NULL, OPT_NO_SHUFFLE},
    {"drop-last", no_argument, NULL, OPT_DROP_LAST},
    {"shuffle", required_argument, NULL, OPT_SHUFFLE},
    {"block-size", required_argument, NULL, OPT_BLOCK_SIZE},
    {"shuffle-window", required_argument, NULL, OPT_WINDOW},
    {"start-slot", required_argument, NULL, OPT_START_SLOT},
    {"indices", required_argument, NULL, OPT_INDICES},
    {"weights", required_argument, NULL, OPT_WEIGHTS},
    {"num-samples", required_argument, NULL, OPT_NUM_SAMPLES},
    {"balance-classes", no_argument, NULL, OPT_BALANCE},
    {"mix-sizes", required_argument, NULL, OPT_MIX_SIZES},
    {"mix-weights", required_argument, NULL, OPT_MIX_WEIGHTS},
    {"batch", required_argument, NULL, 'b'},
    {"help", no_argument, NULL, 'h'},
    {NULL, 0, NULL, 0},
};

static bool all_digits(const char *s)
{
    if (!*s)
        return false;
    for (; *s; s++)
        if (!isdigit((unsigned char)*s))
            return false;
    return true;
}

static int order_run(int argc, char **argv, stk_sampling *sg);

int cmd_order(int argc, char **argv)
{
    stk_sampling sg = {0};
    int status = order_run(argc, argv, &sg);
    cli_sampling_free(&sg);
    return status;
}

/* The labels of the population (the indices, or the whole dataset). */
static bool read_labels(stk_dataset *ds, uint64_t count, stk_sampling *sg)
{
    uint64_t p = sg->indices ? sg->num_indices : count;
    int64_t *lab = malloc((p ? p : 1) * sizeof *lab);
    if (!lab) {
        cli_error("--balance-classes: out of memory");
        return false;
    }
    for (uint64_t i = 0; i < p; i++) {
        uint64_t index = sg->indices ? sg->indices[i] : i;
        if (index >= count) {
            cli_error("--indices: %llu is not below the dataset size %llu",
                      (unsigned long long)index, (unsigned long long)count);
            free(lab);
            return false;
        }
        if (stk_dataset_label(ds, index, &lab[i]) < 0) {
            cli_error("--balance-classes: %s", stk_errmsg());
            free(lab);
            return false;
        }
    }
    sg->labels = lab;
    sg->num_labels = p;
    return true;
}

static int order_run(int argc, char **argv, stk_sampling *sg)
{
    stk_sampler_options so = {0};
    bool balance = false;
    uint64_t nweights = 0;
    uint64_t epoch = 0;
    cli_getopt_start();
    int c;
    while ((c = cli_getopt(argc, argv, ":s:e:b:h", order_options)) != -1) {
        switch (c) {
        case 's': if (!cli_parse_u64(optarg, "--seed", &so.seed)) return EXIT_USAGE; break;
        case 'e': if (!cli_parse_u64(optarg, "--epoch", &epoch)) return EXIT_USAGE; break;
        case 'b': if (!cli_parse_count(optarg, "--batch", &so.batch_size)) return EXIT_USAGE; break;
        case OPT_RANK: if (!cli_parse_u32(optarg, "--rank", &so.rank)) return EXIT_USAGE; break;
        case OPT_WORLD: if (!cli_parse_count(optarg, "--world-size", &so.world_size)) return EXIT_USAGE; break;
        case OPT_NO_SHUFFLE: so.no_shuffle = 1; break;
        case OPT_DROP_LAST: so.drop_last = 1; break;
        case OPT_SHUFFLE: if (!cli_parse_shuffle(optarg, &so.shuffle)) return EXIT_USAGE; break;
        case OPT_BLOCK_SIZE: {
            uint32_t v;
            if (!cli_parse_count(optarg, "--block-size", &v)) return EXIT_USAGE;
            so.block_size = v;
            break;
        }
        case OPT_WINDOW: if (!cli_parse_count(optarg, "--shuffle-window", &so.shuffle_window)) return EXIT_USAGE; break;
        case OPT_START_SLOT: if (!cli_parse_u64(optarg, "--start-slot", &so.start_slot)) return EXIT_USAGE; break;
        case OPT_INDICES: if (!cli_read_indices(optarg, sg)) return EXIT_USAGE; break;
        case OPT_WEIGHTS: if (!cli_read_weights(optarg, sg)) return EXIT_USAGE; break;
        case OPT_NUM_SAMPLES: if (!cli_parse_u64(optarg, "--num-samples", &sg->num_samples)) return EXIT_USAGE; break;
        case OPT_BALANCE: balance = true; break;
        case OPT_MIX_SIZES: if (!cli_parse_mix_sizes(optarg, sg)) return EXIT_USAGE; break;
        case OPT_MIX_WEIGHTS: if (!cli_parse_mix_weights(optarg, sg, &nweights)) return EXIT_USAGE; break;
        case 'h': fputs(order_usage, stdout); return 0;
        default: return EXIT_USAGE; /* cli_getopt said why */
        }
    }
    if (!cli_check_order(so.no_shuffle, so.shuffle, so.block_size, so.shuffle_window))
        return EXIT_USAGE;
    static const char *const names[] = {"DATASET-or-SIZE"};
    if (!cli_positionals(argc, argv, optind, "order", names, 1))
        return EXIT_USAGE;
    if (sg->mix_weights && nweights != sg->num_mix) {
        cli_error("--mix-weights: %llu weights for %llu --mix-sizes", (unsigned long long)nweights,
                  (unsigned long long)sg->num_mix);
        return EXIT_USAGE;
    }
    if (balance && sg->weights) {
        cli_error("--balance-classes and --weights exclude each other");
        return EXIT_USAGE;
    }
    const char *what = argv[optind];
    if (all_digits(what)) {
        if (balance) {
            cli_error("--balance-classes needs a DATASET (its labels), not a size");
            return EXIT_USAGE;
        }
        if (!cli_parse_u64(what, "SIZE", &so.dataset_size))
            return EXIT_USAGE;
    } else {
        stk_dataset *ds;
        if (stk_dataset_open(what, NULL, &ds) < 0) {
            cli_error("%s", stk_errmsg());
            return EXIT_RUNTIME;
        }
        stk_dataset_info info;
        stk_dataset_info_get(ds, &info);
        so.dataset_size = info.count;
        bool ok = !balance || read_labels(ds, info.count, sg);
        stk_dataset_close(ds);
        if (!ok)
            return EXIT_RUNTIME;
    }
    if (cli_sampling_set(sg))
        so.sampling = sg;
    stk_sampler *s;
    if (stk_sampler_create(&so, &s) < 0) {
        cli_error("%s", stk_errmsg());
        return EXIT_USAGE;
    }
    uint64_t n = stk_sampler_length(s);
    for (uint64_t i = 0; i < n; i++)
        printf("%llu\n", (unsigned long long)stk_sampler_index(s, epoch, i));
    stk_sampler_destroy(s);
    if (fflush(stdout) != 0) {
        cli_error("cannot write the order to stdout");
        return EXIT_RUNTIME;
    }
    return 0;
}
