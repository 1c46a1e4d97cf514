/*
 * cmd_preview.c — `stoker preview`: one PNG showing a pipeline's augmented
 * samples, so a user can see what the network is fed (crops, flips, colour
 * jitter) before training on it. A thin wrapper over stk_preview.
 */
#include "args.h"
#include "cli.h"

#include <stoker/stoker.h>

#include <getopt.h>
#include <stdio.h>
#include <string.h>

static const char preview_usage[] =
    "usage: stoker preview DATASET --pipeline SPEC -o FILE.png [options]\n"
    "\n"
    "Run the pipeline on the first samples of a shuffled epoch and write them as one PNG\n"
    "grid, with normalize undone so the colours are the augmented image's.\n"
    "\n"
    "options:\n"
    "  -p, --pipeline SPEC    pipeline spec or preset (docs/pipeline.md), required\n"
    "  -o, --output FILE      the PNG to write, required\n"
    "  -n, --count N          samples shown (16)\n"
    "  -s, --seed S           shuffle/augmentation seed (0)\n"
    "  -c, --columns C        grid columns (about sqrt(N))\n"
    "  -l, --labels           a caption under each tile: \"#INDEX CLASS\" (dataset index,\n"
    "                         class name or label number)\n"
    "      --compare          the original sample (fitted into the tile) left of each\n"
    "                         augmented one\n"
    "      --scale K          draw each pixel as a KxK block (1-64; default: tiles under\n"
    "                         64 pixels are enlarged by the smallest whole factor that\n"
    "                         reaches 64, e.g. CIFAR's 32x32 by 2; 1 never enlarges)\n"
    "  -h, --help             this text\n";

static const struct option preview_options[] = {
    {"pipeline", required_argument, NULL, 'p'},
    {"output", required_argument, NULL, 'o'},
    {"count", required_argument, NULL, 'n'},
    {"seed", required_argument, NULL, 's'},
    {"columns", required_argument, NULL, 'c'},
    {"labels", no_argument, NULL, 'l'},
    {"compare", no_argument, NULL, 'C'},
    {"scale", required_argument, NULL, 'S'},
    {"help", no_argument, NULL, 'h'},
    {NULL, 0, NULL, 0},
};

int cmd_preview(int argc, char **argv)
{
    const char *pipeline = NULL, *output = NULL;
    stk_preview_options po = {.count = 16};
    int c;
    cli_getopt_start();
    while ((c = cli_getopt(argc, argv, ":p:o:n:s:c:lh", preview_options)) != -1) {
        switch (c) {
        case 'p': pipeline = optarg; break;
        case 'o': output = optarg; break;
        case 'n': if (!cli_parse_count(optarg, "--count", &po.count)) return EXIT_USAGE; break;
        case 's': if (!cli_parse_u64(optarg, "--seed", &po.seed)) return EXIT_USAGE; break;
        case 'c': if (!cli_parse_count(optarg, "--columns", &po.columns)) return EXIT_USAGE; break;
        case 'l': po.labels = 1; break;
        case 'C': po.compare = 1; break;
        case 'S': if (!cli_parse_count_max(optarg, "--scale", 64, &po.scale)) return EXIT_USAGE; break;
        case 'h': fputs(preview_usage, stdout); return 0;
        default: return EXIT_USAGE; /* cli_getopt said why */
        }
    }
    static const char *const names[] = {"DATASET"};
    if (!cli_positionals(argc, argv, optind, "preview", names, 1) ||
        !cli_required("preview", "--pipeline", pipeline) ||
        !cli_required("preview", "-o FILE", output))
        return EXIT_USAGE;
    stk_dataset *ds = NULL;
    int rc = stk_dataset_open(argv[optind], NULL, &ds);
    if (rc < 0) {
        cli_error("%s", stk_errmsg());
        return EXIT_RUNTIME;
    }
    rc = stk_preview_write(ds, pipeline, &po, output);
    if (rc < 0)
        cli_error("%s", stk_errmsg());
    else
        fprintf(stderr, "stoker preview: wrote %s\n", output);
    stk_dataset_close(ds);
    return rc == 0 ? 0 : rc == STK_ESPEC || rc == STK_EINVAL ? EXIT_USAGE : EXIT_RUNTIME;
}
