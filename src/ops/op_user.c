/*
 * op_user.c — user-defined ops (stoker/op.h): the registry, plugin loading,
 * the parser rows of registered ops and of `plugin PATH`, and the calls the
 * image plan makes to compile, draw and run one.
 *
 * Registry. An append-only array of entries, each allocated once and never
 * freed: a parsed spec and a compiled plan point at entries without holding
 * a lock or a count, and a registration made while loaders run is simply
 * seen by the specs parsed after it. Registering takes reg_mu and publishes
 * the new count with a release store; readers load it with acquire, so the
 * entry is complete before it is visible. A registration copies the op's
 * struct (struct_size bytes of it; hooks a smaller, older struct lacks stay
 * NULL), so the caller may reuse its own.
 *
 * Names. [a-z_][a-z0-9_]*, at most STK_OP_NAME_MAX bytes, matched by the
 * parser case-insensitively; a name already used by a built-in op, an
 * alias, a preset or an earlier registration is refused, naming who holds
 * it.
 *
 * Plugins. stk_plugin_load dlopens a library (RTLD_NOW | RTLD_LOCAL) and
 * calls its stk_plugin_init with a stk_plugin_host whose functions are this
 * library's: a plugin needs stoker's headers only, not libstoker at link
 * time, and registers into the copy of stoker that loaded it even when that
 * copy is linked statically (the Python module, the CLI). Loads are
 * serialised by plugin_mu (never held while reg_mu is, except in the
 * order plugin_mu -> reg_mu); the same library loaded twice (dlopen returns
 * the handle it already has) is a no-op. A library is never dlclosed once
 * its init ran: its ops' hooks live in it.
 *
 * Determinism. draw is the only place a user op sees randomness, and it
 * gets the sample's own stream (stk_rng, cast to the opaque stk_op_rng), at
 * its position in spec order: the draws are a pure function of (seed,
 * epoch, sample) as for the built-in ops, whatever the thread count.
 */
#include "ops/op_user.h"

#include "core/error.h"

#include <ctype.h>
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#define ORIGIN_MAX 512
#define PLUGINS_MAX 256

typedef struct stk_user_entry {
    stk_op_desc desc; /* first: desc.syntax is the parser's row */
    stk_user_op op;   /* the registered copy (hooks beyond its struct_size NULL) */
    char name[STK_OP_NAME_MAX + 1];
    char usage[128];
    char origin[ORIGIN_MAX]; /* "plugin PATH", or "" for stk_op_register */
} stk_user_entry;

static pthread_mutex_t reg_mu = PTHREAD_MUTEX_INITIALIZER;
static stk_user_entry *reg[STK_USER_OPS_MAX]; /* [0, nreg): written once under reg_mu */
static atomic_int nreg;


/* ---------------------------------------------------------------------- */
/* The random stream                                                       */
/* ---------------------------------------------------------------------- */

double stk_op_rng_uniform(stk_op_rng *rng) { return stk_rng_uniform((stk_rng *)(void *)rng); }

uint32_t stk_op_rng_u32(stk_op_rng *rng) { return stk_rng_u32((stk_rng *)(void *)rng); }

/* ---------------------------------------------------------------------- */
/* Registration                                                            */
/* ---------------------------------------------------------------------- */

static int user_parse(stk_spec_parser *P, const stk_spec_stage *st, const stk_spec_opdef *def);

/* Who already holds `name`: a built-in op or alias, a preset, a registered
 * op. Writes a description into who; 0 when free. */
static int name_taken(const char *name, char *who, size_t cap)
{
    size_t len = strlen(name);
    const stk_spec_opdef *plug = &stk_op_plugin.syntax;
    for (int i = -1; i < stk_op_count; i++) {
        const stk_spec_opdef *d = i < 0 ? plug : stk_op_table[i];
        if (strcasecmp(d->name, name) == 0) {
            snprintf(who, cap, "is a built-in op");
            return 1;
        }
        for (const char *al = d->aliases; al && *al;) {
            size_t n = strcspn(al, "|");
            if (n == len && strncasecmp(al, name, n) == 0) {
                snprintf(who, cap, "is an alias of the built-in op '%s'", d->name);
                return 1;
            }
            al += n + (al[n] == '|');
        }
    }
    if (stk_spec_preset(name)) {
        snprintf(who, cap, "is a preset");
        return 1;
    }
    int n = atomic_load_explicit(&nreg, memory_order_acquire);
    for (int i = 0; i < n; i++)
        if (strcasecmp(reg[i]->name, name) == 0) {
            snprintf(who, cap, "is already registered%s%s", reg[i]->origin[0] ? " by " : "",
                     reg[i]->origin);
            return 1;
        }
    return 0;
}

/* `origin` is "plugin PATH" or "". */
static int register_from(const char *origin, const stk_user_op *op)
{
    const char *sep = origin[0] ? ": " : "";
    if (!op)
        return stk_fail(STK_EINVAL, "%s%sstk_op_register: op is NULL", origin, sep);
    /* abi_version, struct_size and name keep their places in every version. */
    const char *nm = op->name ? op->name : "(no name)";
    if (op->abi_version != STK_OP_ABI_VERSION)
        return stk_fail(STK_EUNSUPPORTED,
                        "%s%sop '%.*s' was built for stoker op ABI version %u, but this "
                        "stoker (%s) has op ABI version %u; rebuild it against this stoker's "
                        "stoker/op.h",
                        origin, sep, STK_OP_NAME_MAX, nm, op->abi_version, STK_VERSION_STRING,
                        STK_OP_ABI_VERSION);
    if (op->struct_size < STK_USER_OP_SIZE_V1 || op->struct_size > sizeof(stk_user_op))
        return stk_fail(STK_EUNSUPPORTED,
                        "%s%sop '%.*s': struct_size %u is not one this stoker (%s) knows "
                        "(%u to %zu bytes for op ABI version %u): %s",
                        origin, sep, STK_OP_NAME_MAX, nm, op->struct_size, STK_VERSION_STRING,
                        (unsigned)STK_USER_OP_SIZE_V1, sizeof(stk_user_op), STK_OP_ABI_VERSION,
                        op->struct_size > sizeof(stk_user_op)
                            ? "it was built against a newer stoker/op.h"
                            : "set it to sizeof(stk_user_op)");
    size_t len = op->name ? strlen(op->name) : 0;
    int ok = len >= 1 && len <= STK_OP_NAME_MAX &&
             (islower((unsigned char)op->name[0]) || op->name[0] == '_');
    for (size_t i = 0; ok && i < len; i++) {
        unsigned char c = (unsigned char)op->name[i];
        ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
    }
    if (!ok)
        return stk_fail(STK_EINVAL,
                        "%s%sop name '%.*s' is not valid: lower-case letters, digits and '_', "
                        "not starting with a digit, 1 to %d bytes",
                        origin, sep, STK_OP_NAME_MAX, nm, STK_OP_NAME_MAX);
    if (!op->run)
        return stk_fail(STK_EINVAL, "%s%sop '%s' has no run hook", origin, sep, op->name);

    stk_user_entry *e = calloc(1, sizeof *e);
    if (!e)
        return stk_fail(STK_ENOMEM, "stk_op_register: out of memory");
    memcpy(&e->op, op, op->struct_size);
    memcpy(e->name, op->name, len + 1);
    snprintf(e->usage, sizeof e->usage, "%s", op->usage ? op->usage : "");
    snprintf(e->origin, sizeof e->origin, "%s", origin);
    e->op.name = e->name;
    e->op.usage = e->usage;
    e->desc.syntax = (stk_spec_opdef){e->name, NULL, STK_OP_USER, STK_ORD_PIXELS | STK_ORD_U8,
                                      "(it works on uint8 pixels)", user_parse, NULL, 0, e->usage};

    pthread_mutex_lock(&reg_mu);
    char who[ORIGIN_MAX + 64];
    int rc = 0, n = atomic_load_explicit(&nreg, memory_order_relaxed);
    if (name_taken(e->name, who, sizeof who))
        rc = stk_fail(STK_EINVAL, "%s%sop '%s' cannot be registered: '%s' %s", origin, sep,
                      e->name, e->name, who);
    else if (n == STK_USER_OPS_MAX)
        rc = stk_fail(STK_ELIMIT, "%s%sop '%s' cannot be registered: %d ops are registered "
                      "already (the limit)", origin, sep, e->name, STK_USER_OPS_MAX);
    else {
        reg[n] = e;
        atomic_store_explicit(&nreg, n + 1, memory_order_release);
    }
    pthread_mutex_unlock(&reg_mu);
    if (rc < 0)
        free(e);
    return rc;
}

int stk_op_register(const stk_user_op *op) { return register_from("", op); }

int stk_user_rows(const stk_spec_opdef **rows, int cap)
{
    int n = atomic_load_explicit(&nreg, memory_order_acquire);
    if (!rows)
        return n;
    if (n > cap)
        n = cap;
    for (int i = 0; i < n; i++)
        rows[i] = &reg[i]->desc.syntax;
    return n;
}

/* ---------------------------------------------------------------------- */
/* Plugins                                                                 */
/* ---------------------------------------------------------------------- */

typedef struct host_ctx {
    stk_plugin_host host; /* first: the plugin is handed &ctx->host */
    char origin[ORIGIN_MAX];
    char path[ORIGIN_MAX];
} host_ctx;

/* The loaded libraries and the host tables they were handed (a plugin may
 * keep its pointer: the table lives as long as the process). */
static pthread_mutex_t plugin_mu = PTHREAD_MUTEX_INITIALIZER;
static void *plugins[PLUGINS_MAX]; /* dlopen handles, under plugin_mu */
static host_ctx hosts[PLUGINS_MAX]; /* [k] handed to plugins[k] */
static int nplugins;

/* fork(): a lock another thread held at that moment would stay locked in
 * the child (where a spec naming a user op, or a plugin load, would
 * hang). reg_mu is a leaf: taken before the fork, so the registry is whole
 * in the child. plugin_mu is held across dlopen (and a plugin's init,
 * which registers: plugin_mu -> reg_mu), so it is only made anew in the
 * child. */
static void user_fork_prepare(void) { pthread_mutex_lock(&reg_mu); }
static void user_fork_parent(void) { pthread_mutex_unlock(&reg_mu); }
static void user_fork_child(void)
{
    pthread_mutex_init(&reg_mu, NULL);
    pthread_mutex_init(&plugin_mu, NULL);
}
__attribute__((constructor)) static void user_fork_register(void)
{
    pthread_atfork(user_fork_prepare, user_fork_parent, user_fork_child);
}

static int host_register(const stk_plugin_host *host, const stk_user_op *op)
{
    if (!host)
        return stk_fail(STK_EINVAL, "register_op: host is NULL");
    return register_from(((const host_ctx *)(const void *)host)->origin, op);
}

int stk_plugin_load(const char *path)
{
    if (!path || !*path)
        return stk_fail(STK_EINVAL, "stk_plugin_load: no path");
    struct stat sb;
    if (strchr(path, '/') && stat(path, &sb) != 0)
        return stk_fail(errno == ENOENT ? STK_ENOENT : STK_EIO, "plugin %s: %s", path,
                        strerror(errno));
    pthread_mutex_lock(&plugin_mu);
    int rc = 0;
    dlerror();
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *why = dlerror();
        rc = stk_fail(STK_EINVAL, "plugin %s cannot be loaded: %s", path,
                      why ? why : "dlopen failed");
        goto done;
    }
    for (int i = 0; i < nplugins; i++)
        if (plugins[i] == h) { /* loaded before: drop the extra reference */
            dlclose(h);
            goto done;
        }
    if (nplugins == PLUGINS_MAX) {
        dlclose(h);
        rc = stk_fail(STK_ELIMIT, "plugin %s: %d plugins are loaded already (the limit)", path,
                      PLUGINS_MAX);
        goto done;
    }
    dlerror();
    void *sym = dlsym(h, STK_PLUGIN_INIT_SYMBOL);
    if (!sym) {
        dlclose(h);
        rc = stk_fail(STK_EINVAL,
                      "plugin %s has no %s function (a plugin exports "
                      "int stk_plugin_init(const stk_plugin_host *), see stoker/op.h)",
                      path, STK_PLUGIN_INIT_SYMBOL);
        goto done;
    }
    stk_plugin_init_fn init;
    memcpy(&init, &sym, sizeof init); /* (object pointer to function pointer) */
    host_ctx *ctx = &hosts[nplugins];
    memset(ctx, 0, sizeof *ctx);
    snprintf(ctx->path, sizeof ctx->path, "%s", path);
    snprintf(ctx->origin, sizeof ctx->origin, "plugin %s", path);
    ctx->host.abi_version = STK_OP_ABI_VERSION;
    ctx->host.struct_size = (uint32_t)sizeof ctx->host;
    ctx->host.path = ctx->path;
    ctx->host.register_op = host_register;
    ctx->host.rng_uniform = stk_op_rng_uniform;
    ctx->host.rng_u32 = stk_op_rng_u32;
    plugins[nplugins++] = h; /* kept even when init fails: ops may point into it */
    stk_errmsg_clear();
    int irc = init(&ctx->host);
    if (irc < 0) {
        const char *why = stk_errmsg();
        rc = why[0] ? stk_fail_prefix(irc, "plugin %s: stk_plugin_init failed", path)
                    : stk_fail(irc, "plugin %s: stk_plugin_init returned %d (%s)", path, irc,
                               stk_strerror(irc));
    }
done:
    pthread_mutex_unlock(&plugin_mu);
    return rc;
}

/* ---------------------------------------------------------------------- */
/* The parser                                                              */
/* ---------------------------------------------------------------------- */

static int is_ws(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

/* `plugin PATH`: one word, no key. The library was loaded before parsing
 * (stk_user_preload); the stage adds no op. */
static int plugin_parse(stk_spec_parser *P, const stk_spec_stage *st, const stk_spec_opdef *def)
{
    if (st->nargs == 0)
        return stk_spec_err(P, st->after_name, "expected a path after 'plugin' (plugin PATH)");
    if (st->nargs > 1)
        return stk_spec_unexpected(P, st, &st->args[1]);
    return 0;
}

const stk_op_desc stk_op_plugin = {
    .syntax = {"plugin", NULL, STK_OP_USER, 0, NULL, plugin_parse, NULL, 0, "PATH"},
};

int stk_user_preload(const char *text)
{
    if (!text)
        return 0;
#ifdef FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION
    return 0; /* a fuzzer must not dlopen the paths it makes up: the stages add no op */
#endif
    size_t len = strlen(text);
    for (size_t i = 0; i <= len;) {
        size_t end = i;
        while (end < len && text[end] != '|')
            end++;
        size_t a = i;
        while (a < end && is_ws(text[a]))
            a++;
        size_t b = a;
        while (b < end && !is_ws(text[b]))
            b++;
        if (b - a == 6 && strncasecmp(text + a, "plugin", 6) == 0) {
            size_t pa = b, pb = end;
            while (pa < pb && is_ws(text[pa]))
                pa++;
            while (pb > pa && is_ws(text[pb - 1]))
                pb--;
            int one_word = pb > pa;
            for (size_t k = pa; k < pb; k++)
                if (is_ws(text[k]) || text[k] == '=')
                    one_word = 0;
            if (one_word) { /* else the parser reports the stage */
                char *path = malloc(pb - pa + 1);
                if (!path)
                    return stk_fail(STK_ENOMEM, "pipeline spec: out of memory");
                memcpy(path, text + pa, pb - pa);
                path[pb - pa] = '\0';
                int rc = stk_plugin_load(path);
                free(path);
                if (rc < 0) {
                    char why[STK_ERRMSG_MAX];
                    snprintf(why, sizeof why, "%s", stk_errmsg());
                    stk_spec_fail(text, (int)pa + 1, "%s", why);
                    return rc;
                }
            }
        }
        i = end + 1;
    }
    return 0;
}

/* argv from the argument ranges a[k], b[k] of text, spaces dropped (the
 * lexer joins words across spaces next to ',' and '='). One allocation:
 * the pointer array, then the strings; free(*argv). */
static int make_argv(const char *text, int n, const int *a, const int *b, char ***argv)
{
    size_t bytes = (size_t)(n + 1) * sizeof(char *);
    for (int k = 0; k < n; k++)
        bytes += (size_t)(b[k] - a[k]) + 1;
    char **v = malloc(bytes);
    if (!v)
        return stk_fail(STK_ENOMEM, "pipeline spec: out of memory");
    char *s = (char *)(v + n + 1);
    for (int k = 0; k < n; k++) {
        v[k] = s;
        for (int i = a[k]; i < b[k]; i++)
            if (!is_ws(text[i]))
                *s++ = text[i];
        *s++ = '\0';
    }
    v[n] = NULL;
    *argv = v;
    return 0;
}

/* "NAME USAGE" for messages. */
static void op_title(const stk_user_entry *e, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s%s%s", e->name, e->usage[0] ? " " : "", e->usage);
}

/* Run the op's parse hook on the arguments; *state on success. Errors as
 * spec errors at `col` (1-based). */
static int call_parse(const stk_user_entry *e, const char *text, int col, int n, const int *a,
                      const int *b, void **state)
{
    *state = NULL;
    if (!e->op.parse) {
        if (n > 0)
            return stk_spec_fail(text, a[0] + 1, "'%s' takes no arguments", e->name);
        return 0;
    }
    char **argv = NULL;
    int rc = make_argv(text, n, a, b, &argv);
    if (rc < 0)
        return rc;
    char err[512] = "";
    rc = e->op.parse(e->op.user, n, (const char *const *)argv, state, err, sizeof err);
    free(argv);
    if (rc < 0) {
        if (*state && e->op.free)
            e->op.free(*state);
        *state = NULL;
        err[sizeof err - 1] = '\0';
        char title[256];
        op_title(e, title, sizeof title);
        return stk_spec_fail(text, col, "%s%s%s%s: %s", title, e->origin[0] ? " (" : "",
                             e->origin, e->origin[0] ? ")" : "", err[0] ? err : "invalid arguments");
    }
    return 0;
}

/* A registered op's stage: remember where its arguments are, and check
 * them with the op's own parse hook (the state is dropped; the plan makes
 * its own at compile). */
static int user_parse(stk_spec_parser *P, const stk_spec_stage *st, const stk_spec_opdef *def)
{
    const stk_user_entry *e = (const stk_user_entry *)(const void *)def;
    int rc = 0;
    stk_spec_op *op = stk_spec_new_op(P, def, st->name.a, &rc);
    if (!op)
        return rc;
    op->u.user.nargs = st->nargs;
    for (int k = 0; k < st->nargs; k++) {
        op->u.user.a[k] = st->args[k].a;
        op->u.user.b[k] = st->args[k].b;
    }
    if (st->nargs)
        op->arg_col = st->args[0].a + 1;
    void *state = NULL;
    if ((rc = call_parse(e, P->s, op->arg_col, op->u.user.nargs, op->u.user.a, op->u.user.b,
                         &state)) < 0)
        return rc;
    if (state && e->op.free)
        e->op.free(state);
    return 0;
}

/* ---------------------------------------------------------------------- */
/* The plan's calls                                                        */
/* ---------------------------------------------------------------------- */

int stk_user_compile(const char *text, const stk_spec_op *o, const uint32_t in[3],
                     stk_user_inst *u)
{
    const stk_user_entry *e = (const stk_user_entry *)(const void *)o->def;
    memset(u, 0, sizeof *u);
    u->e = e;
    memcpy(u->in, in, sizeof u->in);
    memcpy(u->out, in, sizeof u->out);
    int rc = call_parse(e, text, o->arg_col, o->u.user.nargs, o->u.user.a, o->u.user.b,
                        &u->state);
    if (rc < 0)
        return rc;
    if (!e->op.output_shape)
        return 0;
    char err[512] = "";
    uint32_t out[3] = {in[0], in[1], in[2]};
    char title[256];
    op_title(e, title, sizeof title);
    if ((rc = e->op.output_shape(u->state, in, out, err, sizeof err)) < 0) {
        err[sizeof err - 1] = '\0';
        return stk_spec_fail(text, o->col, "%s cannot take a %ux%ux%u (HxWxC) image: %s", title,
                             in[0], in[1], in[2], err[0] ? err : "output_shape failed");
    }
    if (out[0] < 1 || out[1] < 1 || out[0] > STK_SPEC_MAX_SIZE || out[1] > STK_SPEC_MAX_SIZE ||
        (out[2] != 1 && out[2] != 3))
        return stk_spec_fail(text, o->col,
                             "%s gives a %ux%ux%u (HxWxC) image for a %ux%ux%u one: sides must "
                             "be 1 to %u and channels 1 or 3",
                             title, out[0], out[1], out[2], in[0], in[1], in[2],
                             (unsigned)STK_SPEC_MAX_SIZE);
    memcpy(u->out, out, sizeof u->out);
    return 0;
}

void stk_user_release(stk_user_inst *u)
{
    if (u && u->e && u->state && u->e->op.free)
        u->e->op.free(u->state);
    if (u)
        u->state = NULL;
}

void stk_user_draw(const stk_user_inst *u, stk_rng *rng, double params[STK_OP_MAX_DRAWS])
{
    memset(params, 0, STK_OP_MAX_DRAWS * sizeof *params);
    if (u->e->op.draw)
        u->e->op.draw(u->state, (stk_op_rng *)(void *)rng, params);
}

int stk_user_run(const stk_user_inst *u, const double *params, const uint8_t *in, uint8_t *out)
{
    const stk_user_entry *e = u->e;
    stk_op_image src = {(uint8_t *)in, u->in[0], u->in[1], u->in[2], 0,
                        (size_t)u->in[1] * u->in[2]};
    stk_op_image dst = {out, u->out[0], u->out[1], u->out[2], 0,
                        (size_t)u->out[1] * u->out[2]};
    char err[768] = "";
    int rc = e->op.run(u->state, params, &src, &dst, err, sizeof err);
    if (rc >= 0)
        return 0;
    err[sizeof err - 1] = '\0';
    /* A code the op made up is a failure of the op: fatal. */
    int code = rc == STK_EDATA || (rc <= STK_EINVAL && rc >= STK_ETIMEDOUT) ? rc : STK_EINVAL;
    if (err[0])
        return stk_fail(code, "op '%s'%s%s: %s", e->name, e->origin[0] ? " of " : "", e->origin,
                        err);
    return stk_fail(code, "op '%s'%s%s failed (it returned %d)", e->name,
                    e->origin[0] ? " of " : "", e->origin, rc);
}
