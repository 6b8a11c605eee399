/* The kernel's side of issue 28's "2 threads over 1" lines: a native publish's and a download's per-file system
 * calls, and nothing else (no hashing, no checks of what comes back, no Python), on one thread, on N threads of
 * one process, or on N processes. Built and run by bench_kernel_bound.py, which explains the method.
 *
 *   kernel_bound publish SRC WORK WORKERS threads|processes   SRC's tree -> WORK/staging, syncfs, -> WORK/blobs
 *   kernel_bound split SRC WORK WORKERS threads|processes     the same, blobs/ split in 256 directories by a
 *                                                             blob's first byte, each staged in its own
 *   kernel_bound download SRC WORK WORKERS threads|processes  WORK/blobs -> WORK/dest, SRC's shape
 *
 * Prints one JSON line: the milliseconds of each phase. The calls per file are those `strace -f -c` counts for
 * the native engine (docs/performance.md, "Syscalls per file"). SRC is bench_corpus's shape: directories of
 * regular files, one level deep; a blob's name is its file's index in 64 digits, in place of its sha256. */
#define _GNU_SOURCE
#include <dirent.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#define MAX_DIRS 4096
#define MAX_FILES (1 << 20)
#define MAX_NAME 256

static char src[1024], work[1024];
static int ndirs, nfiles, workers, by_processes;
static char dirs[MAX_DIRS][MAX_NAME];
static int first_file[MAX_DIRS + 1]; /* dir d holds files first_file[d] .. first_file[d+1]-1 */
static char (*names)[MAX_NAME];
static int staging_fd, blobs_fd, dest_fd;
/* split: blobs/00 .. blobs/ff, a blob staged in the directory it is renamed in (a layout this store has not) */
static int split, shard_fd[256];
static atomic_int next_item;

static void fail(const char *what, const char *name) {
    fprintf(stderr, "kernel_bound: %s %s: ", what, name);
    perror("");
    exit(1);
}

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static int cmp(const void *a, const void *b) { return strcmp(a, b); }

/* The tree's shape, listed once untimed (the capture below lists it again, timed). */
static void shape(void) {
    DIR *top = opendir(src);
    struct dirent *e;
    if (!top) fail("opendir", src);
    while ((e = readdir(top)))
        if (e->d_name[0] != '.') {
            if (ndirs == MAX_DIRS) fail("more directories than MAX_DIRS in", src);
            snprintf(dirs[ndirs++], MAX_NAME, "%s", e->d_name);
        }
    closedir(top);
    qsort(dirs, ndirs, MAX_NAME, cmp);
    names = calloc(MAX_FILES, MAX_NAME);
    if (!names) fail("calloc", "names");
    for (int d = 0; d < ndirs; d++) {
        char path[2048];
        snprintf(path, sizeof path, "%s/%s", src, dirs[d]);
        DIR *dir = opendir(path);
        if (!dir) fail("opendir", path);
        first_file[d] = nfiles;
        while ((e = readdir(dir)))
            if (e->d_name[0] != '.') {
                if (nfiles == MAX_FILES) fail("more files than MAX_FILES in", src);
                snprintf(names[nfiles++], MAX_NAME, "%s", e->d_name);
            }
        closedir(dir);
        qsort(names[first_file[d]], nfiles - first_file[d], MAX_NAME, cmp);
    }
    first_file[ndirs] = nfiles;
}

static int dir_of(int file) {
    int d = 0;
    while (first_file[d + 1] <= file) d++;
    return d;
}

/* capture: each directory listed with O_NOATIME, each entry lstat-ed and its xattr names listed */
static void capture_dir(int d) {
    char path[2048], buf[65536], xattrs[1024];
    snprintf(path, sizeof path, "%s/%s", src, dirs[d]);
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOATIME | O_CLOEXEC);
    if (fd < 0) fail("open", path);
    for (long got; (got = syscall(SYS_getdents64, fd, buf, sizeof buf)) > 0;) {}
    for (int f = first_file[d]; f < first_file[d + 1]; f++) {
        struct stat st;
        if (fstatat(fd, names[f], &st, AT_SYMLINK_NOFOLLOW)) fail("lstat", names[f]);
        snprintf(path, sizeof path, "%s/%s/%s", src, dirs[d], names[f]);
        llistxattr(path, xattrs, sizeof xattrs);
    }
    close(fd);
}

/* read and stage: what native/src/read/stage.rs does for a file of up to 8 MiB (hashing left out) */
static void stage_file(int f) {
    char path[2048], staged[64], buf[1 << 16];
    snprintf(path, sizeof path, "%s/%s/%s", src, dirs[dir_of(f)], names[f]);
    int in = open(path, O_RDONLY | O_NOATIME | O_NOFOLLOW | O_CLOEXEC);
    if (in < 0) fail("open", path);
    struct stat st;
    int flags;
    fstat(in, &st);
    ioctl(in, FS_IOC_GETFLAGS, &flags);
    lseek(in, 0, SEEK_HOLE);
    ssize_t got = pread(in, buf, st.st_size < (off_t)sizeof buf ? st.st_size : (off_t)sizeof buf, 0);
    fstat(in, &st);
    snprintf(staged, sizeof staged, "blob-%d", f);
    int out = openat(split ? shard_fd[f % 256] : staging_fd, staged, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0444);
    if (out < 0) fail("create", staged);
    if (got > 0 && pwrite(out, buf, got, 0) != got) fail("write", staged);
    close(out);
    close(in);
}

static void move_file(int f) {
    char staged[64], blob[80];
    snprintf(staged, sizeof staged, "blob-%d", f);
    snprintf(blob, sizeof blob, "%064d", f);
    int from = split ? shard_fd[f % 256] : staging_fd, to = split ? shard_fd[f % 256] : blobs_fd;
    if (renameat(from, staged, to, blob)) fail("rename", staged);
}

/* a download's unit: one directory's files created, written, restored, then read back */
static void create_dir(int d) {
    char buf[1 << 16], blob[80], xattrs[1024];
    if (mkdirat(dest_fd, dirs[d], 0755)) fail("mkdir", dirs[d]);
    int dir = openat(dest_fd, dirs[d], O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dir < 0) fail("open", dirs[d]);
    for (int f = first_file[d]; f < first_file[d + 1]; f++) {
        snprintf(blob, sizeof blob, "%064d", f);
        int in = openat(blobs_fd, blob, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        if (in < 0) fail("open", blob);
        struct stat st;
        int flags;
        fstat(in, &st);
        ssize_t got = pread(in, buf, st.st_size < (off_t)sizeof buf ? st.st_size : (off_t)sizeof buf, 0);
        int out = openat(dir, names[f], O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (out < 0) fail("create", names[f]);
        if (got > 0 && pwrite(out, buf, got, 0) != got) fail("write", names[f]);
        if (fchown(out, st.st_uid, st.st_gid)) fail("fchown", names[f]);
        fchmod(out, 0644);
        flistxattr(out, xattrs, sizeof xattrs);
        ioctl(out, FS_IOC_GETFLAGS, &flags);
        struct timespec times[2] = {{1, 2}, {3, 4}};
        futimens(out, times);
        close(out);
        close(in);
    }
    for (int f = first_file[d]; f < first_file[d + 1]; f++) {
        struct stat st;
        if (fstatat(dir, names[f], &st, AT_SYMLINK_NOFOLLOW)) fail("lstat", names[f]);
    }
    close(dir);
}

/* one phase: items claimed one at a time from a shared counter (threads, as native/src/sys/pool.rs does), or a
 * fixed share each (processes: nothing is shared but the kernel) */
static void (*phase_item)(int);
static int phase_count;

static void *claim(void *unused) {
    (void)unused;
    for (int i; (i = atomic_fetch_add(&next_item, 1)) < phase_count;) phase_item(i);
    return NULL;
}

static double run_phase(void (*item)(int), int count) {
    double start = now_ms();
    phase_item = item;
    phase_count = count;
    atomic_store(&next_item, 0);
    if (workers == 1) {
        claim(NULL);
    } else if (by_processes) {
        for (int w = 0; w < workers; w++)
            if (fork() == 0) {
                for (int i = w * count / workers; i < (w + 1) * count / workers; i++) item(i);
                _exit(0);
            }
        for (int w = 0, status; w < workers; w++)
            if (wait(&status) < 0 || !WIFEXITED(status) || WEXITSTATUS(status)) fail("worker", "failed");
    } else {
        pthread_t threads[64];
        for (int w = 0; w < workers; w++) pthread_create(&threads[w], NULL, claim, NULL);
        for (int w = 0; w < workers; w++) pthread_join(threads[w], NULL);
    }
    return now_ms() - start;
}

static int open_dir(const char *name, int create) {
    char path[2048];
    snprintf(path, sizeof path, "%s/%s", work, name);
    if (create && mkdir(path, 0700)) fail("mkdir", path);
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) fail("open", path);
    return fd;
}

int main(int argc, char **argv) {
    workers = argc == 6 ? atoi(argv[4]) : 0;
    if (workers < 1 || workers > 64) {
        fprintf(stderr, "usage: kernel_bound publish|split|download SRC WORK WORKERS(1-64) threads|processes\n");
        return 2;
    }
    snprintf(src, sizeof src, "%s", argv[2]);
    snprintf(work, sizeof work, "%s", argv[3]);
    by_processes = strcmp(argv[5], "processes") == 0;
    shape();
    split = strcmp(argv[1], "split") == 0;
    if (split || strcmp(argv[1], "publish") == 0) {
        staging_fd = open_dir("staging", 1);
        blobs_fd = open_dir("blobs", 1);
        for (int i = 0; split && i < 256; i++) {
            char name[8];
            snprintf(name, sizeof name, "%02x", i);
            if (mkdirat(blobs_fd, name, 0700)) fail("mkdir", name);
            shard_fd[i] = openat(blobs_fd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        }
        double scan = run_phase(capture_dir, ndirs);
        double read = run_phase(stage_file, nfiles);
        double start = now_ms();
        syncfs(blobs_fd);
        double barrier = now_ms() - start;
        double moves = run_phase(move_file, nfiles);
        printf("{\"scan_ms\": %.3f, \"read_ms\": %.3f, \"syncfs_ms\": %.3f, \"moves_ms\": %.3f, \"total_ms\": %.3f}\n",
               scan, read, barrier, moves, scan + read + barrier + moves);
    } else {
        blobs_fd = open_dir("blobs", 0);
        dest_fd = open_dir("dest", 1);
        double create = run_phase(create_dir, ndirs);
        printf("{\"create_ms\": %.3f, \"total_ms\": %.3f}\n", create, create);
    }
    return 0;
}
