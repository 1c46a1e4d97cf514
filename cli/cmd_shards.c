/*
 * cmd_shards.c — `stoker pack`, `inspect`, `verify` and `cat`: making and
 * looking into .stk shard datasets (docs/format.md). Built on the public
 * API only (stk_pack, stk_verify, stk_dataset_* accessors).
 */
#include "args.h"
#include "cli.h"

#include <stoker/stoker.h>

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------------------------------------ */
/* pack                                                                      */
/* ------------------------------------------------------------------------ */

static const char pack_usage[] =
    "usage: stoker pack SRC DEST [options]\n"
    "\n"
    "Pack dataset SRC (an image folder, a list file 'list:FILE' of path<TAB>label lines,\n"
    "CIFAR, IDX...: any dataset URI) into .stk shards DEST/shard-NNNNN.stk.\n"
    "Encoded images are kept byte for byte and validated by decoding; inputs that\n"
    "cannot be read are skipped and listed on stderr (--strict: fail instead).\n"
    "\n"
    "options:\n"
    "  -s, --shard-size SIZE  start a new shard past SIZE bytes (K/M/G suffixes; 1G)\n"
    "  -j, --jobs N           threads reading and validating (2)\n"
    "      --raw              store decoded raw pixels instead of encoded bytes\n"
    "      --zstd LEVEL       with --raw: compress pixels with zstd (1-19)\n"
    "      --reencode         decode and store new JPEGs (with --max-side, --quality)\n"
    "      --max-side N       with --reencode: shrink images whose longest side is over N\n"
    "      --quality Q        with --reencode: JPEG quality 1-100 (90)\n"
    "      --restart N        rewrite JPEGs losslessly with a restart marker every <= N\n"
    "                         MCUs (same pixels; 4 is a good N) so that random crops\n"
    "                         decode only the part they cover; stored bytes then differ\n"
    "                         from the source files\n"
    "      --no-validate      keep encoded bytes without decoding them first\n"
    "      --strict           fail on the first unreadable input\n"
    "  -q, --quiet            no progress output\n"
    "      --progress-interval S\n"
    "                         when stderr is not a terminal: a progress line every S\n"
    "                         seconds (10; 0: after every block of records)\n"
    "  -h, --help             this text\n";

/* Progress. On a terminal (stderr) one line redrawn in place, at most 10
 * times a second and at the end: a bar, records done/total, percentage,
 * records/s, MB/s of shard bytes written, and the time left at the rate so
 * far. Otherwise (a log, a pipe) the same figures as a plain line every
 * --progress-interval seconds (10; 0: after every block of records) and
 * at the end. --quiet: none at all. */
typedef struct pack_ctx {
    const char *what;    /* "pack" or "verify": the plain line's prefix */
    bool bar;            /* stderr is a terminal: redraw one line */
    bool quiet;
    double interval;     /* plain lines: seconds between them */
    double start, last;  /* monotonic seconds: pack start, last line drawn */
    bool drawn;          /* a bar line is on the screen (to clear before a skip line) */
    uint64_t skipped;
} pack_ctx;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void on_skip(void *ctx, uint64_t index, const char *reason)
{
    pack_ctx *c = ctx;
    (void)index;
    c->skipped++;
    if (c->drawn)
        fputs("\r\033[K", stderr);
    c->drawn = false;
    fprintf(stderr, "skipped: %s\n", reason);
}

/* "1:02:03", "2:03" or "?" (no rate yet) into buf. */
static const char *format_eta(char *buf, size_t n, double seconds)
{
    if (!(seconds >= 0 && seconds < 1e8)) {
        snprintf(buf, n, "?");
        return buf;
    }
    unsigned long long t = (unsigned long long)(seconds + 0.5);
    if (t >= 3600)
        snprintf(buf, n, "%llu:%02llu:%02llu", t / 3600, t / 60 % 60, t % 60);
    else
        snprintf(buf, n, "%llu:%02llu", t / 60, t % 60);
    return buf;
}

/* Progress for pack (bytes: shard bytes written) and verify (bytes
 * UINT64_MAX: nothing written, no MB/s). */
static void on_progress(void *ctx, uint64_t done, uint64_t total, uint64_t bytes)
{
    pack_ctx *c = ctx;
    bool written = bytes != UINT64_MAX;
    if (c->quiet)
        return;
    double t = now_s(), elapsed = t - c->start;
    bool end = done == total;
    if (!end && t - c->last < (c->bar ? 0.1 : c->interval))
        return;
    c->last = t;
    double rate = elapsed > 0 ? (double)done / elapsed : 0;
    double mbps = elapsed > 0 && written ? (double)bytes / 1e6 / elapsed : 0;
    double pct = total ? 100.0 * (double)done / (double)total : 100.0;
    char eta[32];
    format_eta(eta, sizeof eta, rate > 0 ? (double)(total - done) / rate : -1);
    if (c->bar) {
        int width = 30, filled = total ? (int)((uint64_t)width * done / total) : width;
        fprintf(stderr, "\r\033[K[%.*s%*s] %llu/%llu %.1f%% %.0f rec/s ",
                filled, "##############################", width - filled, "",
                (unsigned long long)done, (unsigned long long)total, pct, rate);
        if (written)
            fprintf(stderr, "%.1f MB/s ", mbps);
        fprintf(stderr, "ETA %s", eta);
        c->drawn = !end;
        if (end)
            fputc('\n', stderr);
    } else if (written) {
        fprintf(stderr, "%s: %llu/%llu records (%.1f%%), %.0f records/s, %.1f MB/s, %.1f MB "
                        "written, ETA %s\n",
                c->what, (unsigned long long)done, (unsigned long long)total, pct, rate, mbps,
                (double)bytes / 1e6, eta);
    } else {
        fprintf(stderr, "%s: %llu/%llu records (%.1f%%), %.0f records/s, ETA %s\n", c->what,
                (unsigned long long)done, (unsigned long long)total, pct, rate, eta);
    }
    fflush(stderr);
}

int cmd_pack(int argc, char **argv)
{
    static const struct option options[] = {
        {"shard-size", required_argument, NULL, 's'}, {"jobs", required_argument, NULL, 'j'},
        {"raw", no_argument, NULL, 'r'},              {"zstd", required_argument, NULL, 'z'},
        {"no-validate", no_argument, NULL, 'n'},      {"strict", no_argument, NULL, 'S'},
        {"quiet", no_argument, NULL, 'q'},            {"help", no_argument, NULL, 'h'},
        {"reencode", no_argument, NULL, 'R'},         {"max-side", required_argument, NULL, 'M'},
        {"quality", required_argument, NULL, 'Q'},    {"restart", required_argument, NULL, 'T'},
        {"progress-interval", required_argument, NULL, 'P'},
        {NULL, 0, NULL, 0},
    };
    stk_pack_options o = {0};
    pack_ctx ctx = {.what = "pack", .bar = isatty(STDERR_FILENO), .interval = 10};
    uint32_t interval;
    uint32_t zstd = 0, quality = 0;
    bool reencode = false;
    cli_getopt_start();
    int c;
    while ((c = cli_getopt(argc, argv, ":s:j:qh", options)) != -1) {
        switch (c) {
        case 's': if (!cli_parse_bytes(optarg, "--shard-size", 1, &o.shard_bytes)) return EXIT_USAGE; break;
        case 'j': if (!cli_parse_count(optarg, "--jobs", &o.jobs)) return EXIT_USAGE; break;
        case 'r': o.mode = STK_PACK_RAW; break;
        case 'z': if (!cli_parse_count_max(optarg, "--zstd", 19, &zstd)) return EXIT_USAGE; break;
        case 'n': o.no_validate = 1; break;
        case 'R': reencode = true; break;
        case 'M': if (!cli_parse_count(optarg, "--max-side", &o.max_side)) return EXIT_USAGE; break;
        case 'Q': if (!cli_parse_count_max(optarg, "--quality", 100, &quality)) return EXIT_USAGE; break;
        case 'T': if (!cli_parse_count_max(optarg, "--restart", 65535, &o.restart_interval)) return EXIT_USAGE; break;
        case 'S': o.strict = 1; break;
        case 'q': ctx.quiet = true; break;
        case 'P':
            if (!cli_parse_u32(optarg, "--progress-interval", &interval)) return EXIT_USAGE;
            ctx.interval = interval;
            break;
        case 'h': fputs(pack_usage, stdout); return 0;
        default: return EXIT_USAGE; /* cli_getopt said why */
        }
    }
    static const char *const names[] = {"SRC", "DEST"};
    if (!cli_positionals(argc, argv, optind, "pack", names, 2))
        return EXIT_USAGE;
    if (reencode && o.mode == STK_PACK_RAW) {
        cli_error("--reencode and --raw exclude each other");
        return EXIT_USAGE;
    }
    if (reencode)
        o.mode = STK_PACK_REENCODE;
    if ((o.max_side || quality) && !reencode) {
        cli_error("--max-side and --quality need --reencode");
        return EXIT_USAGE;
    }
    o.quality = (int)quality;
    if (zstd && o.mode != STK_PACK_RAW) {
        cli_error("--zstd needs --raw (encoded images are kept as they are)");
        return EXIT_USAGE;
    }
    if (o.restart_interval && o.mode == STK_PACK_RAW) {
        cli_error("--restart applies to encoded images, not --raw");
        return EXIT_USAGE;
    }
    o.zstd_level = (int)zstd;
    o.on_skip = on_skip;
    o.on_progress_bytes = on_progress;
    o.ctx = &ctx;
    ctx.start = ctx.last = now_s();
    stk_pack_result r;
    int rc = stk_pack(argv[optind], argv[optind + 1], &o, &r);
    if (rc < 0) {
        if (ctx.drawn)
            fputs("\n", stderr);
        cli_error("pack: %s", stk_errmsg());
        return rc == STK_EINVAL ? EXIT_USAGE : EXIT_RUNTIME;
    }
    printf("packed %llu records into %u shard%s (%.1f MB) in %s; skipped %llu unreadable "
           "input%s%s\n",
           (unsigned long long)r.records, r.shards, r.shards == 1 ? "" : "s", (double)r.bytes / 1e6,
           argv[optind + 1], (unsigned long long)r.skipped, r.skipped == 1 ? "" : "s",
           r.skipped ? " (listed on stderr)" : "");
    if (o.restart_interval)
        printf("rewrote %llu of %llu JPEGs with restart markers (the rest kept as they are)\n",
               (unsigned long long)r.restarted, (unsigned long long)r.records);
    return 0;
}

/* ------------------------------------------------------------------------ */
/* inspect                                                                   */
/* ------------------------------------------------------------------------ */

static const char inspect_usage[] =
    "usage: stoker inspect DATASET\n"
    "\n"
    "Print a dataset's format, sample count, shards and sizes, schema, label\n"
    "histogram and metadata.\n";

static const char *type_name(stk_field_type t)
{
    switch (t) {
    case STK_FIELD_BYTES: return "bytes";
    case STK_FIELD_IMAGE: return "image (encoded)";
    case STK_FIELD_RAW_IMAGE: return "raw_image (uint8 HWC)";
    case STK_FIELD_INT64: return "int64";
    case STK_FIELD_FLOAT32: return "float32";
    case STK_FIELD_STRING: return "string";
    }
    return "?";
}

/* Print a class name on one line whatever its bytes: a backslash doubled,
 * LF as backslash-n, other control bytes and bytes outside well-formed
 * UTF-8 as backslash-xHH (the escape of the class_names metadata,
 * docs/format.md). Returns the characters printed. */
static int print_class_name(const char *name)
{
    const unsigned char *s = (const unsigned char *)name;
    size_t n = strlen(name);
    int cols = 0;
    for (size_t i = 0; i < n;) {
        unsigned char c = s[i];
        size_t k = c < 0x80 ? 1 : c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3
                 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
        for (size_t j = 1; j < k; j++)
            if (i + j >= n || (s[i + j] & 0xC0) != 0x80)
                k = 0;
        /* overlong, surrogate and > U+10FFFF forms */
        if (k > 2 && ((c == 0xE0 && s[i + 1] < 0xA0) || (c == 0xED && s[i + 1] > 0x9F) ||
                      (c == 0xF0 && s[i + 1] < 0x90) || (c == 0xF4 && s[i + 1] > 0x8F)))
            k = 0;
        if (c == '\\' || c == '\n')
            cols += fputs(c == '\n' ? "\\n" : "\\\\", stdout) >= 0 ? 2 : 0;
        else if (k == 0 || c < 0x20 || c == 0x7F)
            cols += printf("\\x%02x", c);
        else
            cols += fwrite(s + i, 1, k, stdout) == k;
        i += k ? k : 1;
    }
    return cols;
}

int cmd_inspect(int argc, char **argv)
{
    if (argc == 2 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
        fputs(inspect_usage, stdout);
        return 0;
    }
    if (argc == 2 && argv[1][0] == '-' && argv[1][1]) {
        static const struct option inspect_options[] = {{"help", no_argument, NULL, 'h'},
                                                         {NULL, 0, NULL, 0}};
        cli_unknown_option(argv[1], inspect_options);
        return EXIT_USAGE;
    }
    static const char *const names[] = {"DATASET"};
    if (!cli_positionals(argc, argv, 1, "inspect", names, 1))
        return EXIT_USAGE;
    stk_dataset *ds;
    if (stk_dataset_open(argv[1], NULL, &ds) < 0) {
        cli_error("%s", stk_errmsg());
        return EXIT_RUNTIME;
    }
    stk_dataset_info info;
    stk_dataset_info_get(ds, &info);
    printf("dataset:  %s\nformat:   %s\nsamples:  %llu\n", info.uri, info.format,
           (unsigned long long)info.count);
    if (info.height)
        printf("shape:    %ux%ux%u (HxWxC)\n", info.height, info.width, info.channels);
    uint32_t nshards = stk_dataset_shard_count(ds);
    if (nshards) {
        uint64_t bytes = 0;
        printf("shards:   %u\n", nshards);
        for (uint32_t i = 0; i < nshards; i++) {
            stk_shard_info si;
            stk_dataset_shard_info(ds, i, &si);
            bytes += si.file_bytes;
            if (i < 20 || i + 1 == nshards)
                printf("  %s: %llu records, %.1f MB\n", si.path, (unsigned long long)si.records,
                       (double)si.file_bytes / 1e6);
            else if (i == 20)
                printf("  ...\n");
        }
        printf("size:     %.1f MB, %.1f KB per record\n", (double)bytes / 1e6,
               (double)bytes / 1e3 / (double)info.count);
    }
    printf("fields:\n");
    for (uint32_t i = 0; i < stk_dataset_field_count(ds); i++) {
        stk_field_info f;
        if (stk_dataset_field_info(ds, i, &f) < 0)
            continue;
        printf("  %-12s %s", f.name, type_name(f.type));
        if (f.ndim) {
            printf(" [");
            /* a 0 leading dimension varies per record: "*x4" for boxes */
            for (uint32_t d = 0; d < f.ndim; d++)
                if (f.dims[d])
                    printf("%s%u", d ? "x" : "", f.dims[d]);
                else
                    printf("%s*", d ? "x" : "");
            printf("]");
        }
        printf("%s\n", f.compressed ? ", zstd" : "");
    }
    /* Label histogram (labels come from the index for .stk: no record read). */
    uint64_t counts[1024] = {0}, other = 0;
    int64_t max_label = -1;
    int rc = 0;
    for (uint64_t i = 0; i < info.count; i++) {
        int64_t label;
        if ((rc = stk_dataset_label(ds, i, &label)) < 0)
            break;
        if (label >= 0 && label < 1024)
            counts[label]++;
        else
            other++;
        if (label > max_label)
            max_label = label;
    }
    if (rc < 0) {
        cli_error("%s", stk_errmsg());
    } else if (max_label < 0 && info.count) {
        /* Detection and segmentation sets (coco:, segfolder:): label -1
         * everywhere; a detection set's classes are its box labels'
         * (stk_dataset_class_name). */
        printf("labels:   -1 (no single class per sample)");
        if (info.num_classes)
            printf("; %u classes", info.num_classes);
        printf("\n");
        for (uint32_t l = 0; l < info.num_classes && l < 1024; l++) {
            const char *name = stk_dataset_class_name(ds, l);
            printf("  %4u ", l);
            print_class_name(name ? name : "");
            printf("\n");
        }
    } else {
        /* A set whose labels are bare numbers (TFRecord, RecordIO, CIFAR
         * without a meta file) has no names: say so once rather than print
         * blank ones. */
        bool named = false;
        for (int64_t l = 0; l <= max_label && l < 1024 && !named; l++) {
            const char *name = stk_dataset_class_name(ds, (uint32_t)l);
            named = name && name[0];
        }
        printf("labels:   %lld classes%s\n", (long long)(max_label + 1),
               named ? "" : " (numbers only: the dataset names no classes)");
        for (int64_t l = 0; l <= max_label && l < 1024; l++) {
            const char *name = stk_dataset_class_name(ds, (uint32_t)l);
            printf("  %4lld ", (long long)l);
            int cols = named ? print_class_name(name ? name : "") : 0;
            printf("%*s %llu\n", cols < 24 ? 24 - cols : 0, "", (unsigned long long)counts[l]);
        }
        if (other)
            printf("  (%llu samples with labels outside 0..1023)\n", (unsigned long long)other);
    }
    static const char *const keys[] = {"source", "source_root", "created_by", "shard_set",
                                       "index"};
    for (size_t k = 0; k < sizeof keys / sizeof *keys; k++) {
        const char *v = stk_dataset_metadata(ds, keys[k]);
        if (!v)
            continue;
        /* One value may hold several lines (a TFRecord set's "index": a
         * line per file): each continues under the first. */
        printf("%-9s ", keys[k]);
        for (const char *nl; (nl = strchr(v, '\n')); v = nl + 1)
            printf("%.*s\n%-9s ", (int)(nl - v), v, "");
        printf("%s\n", v);
    }
    for (uint64_t i = 0; i < stk_dataset_skipped_count(ds); i++)
        printf("skipped:  %s\n", stk_dataset_skipped(ds, i));
    stk_dataset_close(ds);
    return rc < 0 ? EXIT_RUNTIME : 0;
}

/* ------------------------------------------------------------------------ */
/* verify                                                                    */
/* ------------------------------------------------------------------------ */

static const char verify_usage[] =
    "usage: stoker verify DATASET [--decode] [-q] [--progress-interval S]\n"
    "\n"
    "For .stk shards: check every shard's structure and every record's checksum,\n"
    "that the shards form one whole set (none missing, extra, foreign or renamed\n"
    "out of order) and that each record comes from a later source sample than the\n"
    "one before. Any other dataset: open it (which checks its framing and index)\n"
    "and read every sample once through its reader (an empty or unreadable file,\n"
    "TFRecord data CRCs, tar member bounds, Datum wire format...). Images are not\n"
    "decoded unless --decode is given: a truncated, corrupt or oversized image is\n"
    "found only with --decode. Each damaged shard or record is printed with its\n"
    "file, record number and sample index; the exit status is 1 if anything is\n"
    "damaged.\n"
    "\n"
    "options:\n"
    "      --decode           also decode every image (slower: finds truncated,\n"
    "                         corrupt and oversized images)\n"
    "  -q, --quiet            no progress output\n"
    "      --progress-interval S\n"
    "                         when stderr is not a terminal: a progress line every S\n"
    "                         seconds (10; 0: after every 64 records)\n"
    "  -h, --help             this text\n";

/* DAMAGED and NOTE lines go to stdout; a progress bar drawn on stderr (the
 * same terminal, usually) is cleared first, as pack clears it for a skip
 * line, and stdout flushed so that the lines keep their order. */
static void clear_bar(pack_ctx *c)
{
    if (c->drawn)
        fputs("\r\033[K", stderr);
    c->drawn = false;
}

static void on_damage(void *ctx, const char *shard, uint64_t record, const char *reason)
{
    clear_bar(ctx);
    if (record == UINT64_MAX)
        printf("DAMAGED %s: %s\n", shard, reason);
    else
        printf("DAMAGED %s record %llu: %s\n", shard, (unsigned long long)record, reason);
    fflush(stdout);
}

static void on_notice(void *ctx, const char *path, const char *message)
{
    clear_bar(ctx);
    printf("NOTE %s: %s\n", path, message);
    fflush(stdout);
}

static void on_verify_progress(void *ctx, uint64_t done, uint64_t total)
{
    on_progress(ctx, done, total, UINT64_MAX);
}

int cmd_verify(int argc, char **argv)
{
    pack_ctx ctx = {.what = "verify", .bar = isatty(STDERR_FILENO), .interval = 10};
    stk_verify_options o = {.on_damage = on_damage, .on_notice = on_notice,
                            .on_progress = on_verify_progress, .ctx = &ctx};
    /* By hand, not getopt_long: getopt would take '--decod' for --decode,
     * and a typo should get a did-you-mean instead. The DATASET is the one
     * word that is not an option; the words are collected in place. */
    int nwords = 1;
    static const struct option verify_options[] = {
        {"decode", no_argument, NULL, 'd'},
        {"quiet", no_argument, NULL, 'q'},
        {"progress-interval", required_argument, NULL, 'P'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0}};
    for (int i = 1; i < argc; i++) {
        const char *interval = NULL;
        int got = cli_option_value(argc, argv, &i, "--progress-interval", NULL, &interval);
        if (got < 0)
            return EXIT_USAGE;
        if (got) {
            uint32_t seconds;
            if (!cli_parse_u32(interval, "--progress-interval", &seconds))
                return EXIT_USAGE;
            ctx.interval = seconds;
        } else if (!strcmp(argv[i], "--decode")) {
            o.decode = 1;
        } else if (!strcmp(argv[i], "-q") || !strcmp(argv[i], "--quiet")) {
            ctx.quiet = true;
        } else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            fputs(verify_usage, stdout);
            return 0;
        } else if (argv[i][0] == '-') {
            cli_unknown_option(argv[i], verify_options);
            return EXIT_USAGE;
        } else {
            argv[nwords++] = argv[i];
        }
    }
    static const char *const names[] = {"DATASET"};
    if (!cli_positionals(nwords, argv, 1, "verify", names, 1))
        return EXIT_USAGE;
    const char *uri = argv[1];
    stk_verify_result r = {0};
    ctx.start = ctx.last = now_s();
    int rc = stk_verify(uri, &o, &r);
    clear_bar(&ctx);
    if (rc < 0 && rc != STK_EDATA) {
        cli_error("%s", stk_errmsg());
        return EXIT_RUNTIME;
    }
    /* Say what was checked: without --decode an image is read, not
     * decoded, and a truncated or random file passes (issue 26). */
    const char *how = o.decode ? " and decoded" : " (images not decoded)";
    if (r.shards == 0 && r.bad_shards == 0) /* not .stk shards: samples through the reader */
        printf("%s: %llu samples read%s; %llu damaged samples\n", rc == 0 ? "OK" : "FAILED",
               (unsigned long long)r.records, how, (unsigned long long)r.bad_records);
    else
        printf("%s: %u shards, %llu records checked%s; %u damaged shards, %llu damaged records\n",
               rc == 0 ? "OK" : "FAILED", r.shards, (unsigned long long)r.records, how,
               r.bad_shards, (unsigned long long)r.bad_records);
    if (!o.decode)
        printf("note: without --decode, %s; 'stoker verify %s --decode' decodes every image and "
               "also finds truncated, corrupt and oversized ones\n",
               r.shards == 0 && r.bad_shards == 0
                   ? "each sample's bytes are read (an empty or unreadable file, a broken record "
                     "or index is found) but images are not decoded"
                   : "each record's bytes are checked against their checksums (the bytes are "
                     "those packed) but images are not decoded",
               uri);
    return rc == 0 ? 0 : EXIT_RUNTIME;
}

/* ------------------------------------------------------------------------ */
/* cat                                                                       */
/* ------------------------------------------------------------------------ */

static const char cat_usage[] =
    "usage: stoker cat DATASET INDEX [--field NAME] [-o FILE]\n"
    "\n"
    "Write one record's field to stdout (or FILE): encoded images as stored,\n"
    "raw images as HWC bytes (shape on stderr), numbers as little-endian arrays.\n"
    "The default field is the image.\n";

int cmd_cat(int argc, char **argv)
{
    static const struct option options[] = {
        {"field", required_argument, NULL, 'f'}, {"output", required_argument, NULL, 'o'},
        {"help", no_argument, NULL, 'h'},        {NULL, 0, NULL, 0},
    };
    const char *field = NULL, *output = NULL;
    cli_getopt_start();
    int c;
    while ((c = cli_getopt(argc, argv, ":f:o:h", options)) != -1) {
        switch (c) {
        case 'f': field = optarg; break;
        case 'o': output = optarg; break;
        case 'h': fputs(cat_usage, stdout); return 0;
        default: return EXIT_USAGE; /* cli_getopt said why */
        }
    }
    static const char *const names[] = {"DATASET", "INDEX"};
    if (!cli_positionals(argc, argv, optind, "cat", names, 2))
        return EXIT_USAGE;
    uint64_t index;
    if (!cli_parse_u64(argv[optind + 1], "INDEX", &index))
        return EXIT_USAGE;
    stk_dataset *ds;
    if (stk_dataset_open(argv[optind], NULL, &ds) < 0) {
        cli_error("%s", stk_errmsg());
        return EXIT_RUNTIME;
    }
    void *data = NULL;
    size_t size = 0;
    uint32_t shape[3] = {0};
    int status = 0;
    if (stk_dataset_read_field(ds, index, field, &data, &size, shape) < 0) {
        cli_error("%s", stk_errmsg());
        status = EXIT_RUNTIME;
        goto done;
    }
    if (shape[0])
        fprintf(stderr, "raw image %ux%ux%u (HxWxC), %zu bytes\n", shape[0], shape[1], shape[2],
                size);
    FILE *f = output ? fopen(output, "wb") : stdout;
    if (!f || fwrite(data, 1, size, f) != size || (output ? fclose(f) : fflush(f)) != 0) {
        cli_error("cannot write %s", output ? output : "stdout");
        status = EXIT_RUNTIME;
    }
done:
    stk_free(data);
    stk_dataset_close(ds);
    return status;
}
