/*
 * scripts/vm/lockf.c — fcntl(2) byte-range locks for the VM's NLM checks (scripts/vm/nfs-nlm.sh):
 * the guest has no tool that takes them (flock(1) of util-linux 2.38 has no --fcntl, and there is
 * neither perl nor python). Built on the host by scripts/nfs-server-stage.sh:
 *   gcc -O2 -static -o $RPCRDMA_VM_CACHE/lockf/lockf scripts/vm/lockf.c
 * and copied into the VM (RPCRDMA_LOCKF_BIN names it there).
 *
 *   lockf FILE STEP...
 *
 * opens FILE read-write and runs its STEPs in order, in ONE process (one lock owner: a lock
 * taken by a step is held until a later step unlocks it or the process exits), printing one line
 * per step as soon as it is done, ending with t=MS (the wall clock, ms since the epoch: compare
 * with `date +%s%3N`):
 *   r:START:LEN  w:START:LEN   F_SETLK (non-blocking) read / write lock of [START, START+LEN)
 *                              (LEN 0: to the end of the file): "w 0 10 ok" / "w 0 10 denied"
 *   R:START:LEN  W:START:LEN   F_SETLKW (blocking): "W 0 10 ok" once granted
 *   u:START:LEN                F_UNLCK of that range: "u 0 5 ok"
 *   t:START:LEN                F_GETLK (a write lock tested): "t 0 100 -> w 0 10 pid N"
 *                              (the first conflicting lock: type r|w, l_start, l_len, l_pid),
 *                              or "t 0 100 -> none"
 *   sleep:SECONDS              a pause (fractions allowed)
 *   wait:PATH                  waits until PATH exists (polled every 10 ms)
 * Exit status: 0 every step ok; 1 a lock was denied (F_SETLK: EAGAIN / EACCES; the steps after
 * it still run); 2 usage, FILE not opened, or another error of fcntl (its line: "... error: ...").
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static long long now_ms(void)
{
	struct timeval tv;
	gettimeofday(&tv, NULL);
	return (long long)tv.tv_sec * 1000 + tv.tv_usec / 1000;
}

static void pause_s(double s)
{
	struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

static int usage(const char *why)
{
	fprintf(stderr, "lockf: %s\nusage: lockf FILE STEP... (r|w|R|W|u|t:START:LEN, sleep:S, wait:PATH)\n", why);
	return 2;
}

int main(int argc, char **argv)
{
	int fd, i, rc = 0;
	if (argc < 3)
		return usage("no steps");
	setvbuf(stdout, NULL, _IOLBF, 0);
	fd = open(argv[1], O_RDWR);
	if (fd < 0) {
		fprintf(stderr, "lockf: open %s: %s\n", argv[1], strerror(errno));
		return 2;
	}
	for (i = 2; i < argc; i++) {
		const char *s = argv[i];
		char op, end;
		long long start, len;
		struct flock fl;
		int cmd;
		if (strncmp(s, "sleep:", 6) == 0) {
			pause_s(atof(s + 6));
			printf("sleep %s ok t=%lld\n", s + 6, now_ms());
			continue;
		}
		if (strncmp(s, "wait:", 5) == 0) {
			while (access(s + 5, F_OK) != 0)
				pause_s(0.01);
			printf("wait %s ok t=%lld\n", s + 5, now_ms());
			continue;
		}
		if (sscanf(s, "%c:%lld:%lld%c", &op, &start, &len, &end) != 3 || !strchr("rwRWut", op) ||
		    start < 0 || len < 0)
			return usage(s);
		memset(&fl, 0, sizeof fl);
		fl.l_whence = SEEK_SET;
		fl.l_start = start;
		fl.l_len = len;
		fl.l_type = op == 'u' ? F_UNLCK : (op == 'r' || op == 'R') ? F_RDLCK : F_WRLCK;
		cmd = op == 't' ? F_GETLK : (op == 'R' || op == 'W') ? F_SETLKW : F_SETLK;
		if (fcntl(fd, cmd, &fl) != 0) {
			int e = errno;
			if (cmd == F_SETLK && (e == EAGAIN || e == EACCES)) {
				printf("%c %lld %lld denied t=%lld\n", op, start, len, now_ms());
				rc = rc ? rc : 1;
			} else {
				printf("%c %lld %lld error: %s t=%lld\n", op, start, len, strerror(e), now_ms());
				rc = 2;
			}
		} else if (op != 't') {
			printf("%c %lld %lld ok t=%lld\n", op, start, len, now_ms());
		} else if (fl.l_type == F_UNLCK) {
			printf("t %lld %lld -> none t=%lld\n", start, len, now_ms());
		} else {
			printf("t %lld %lld -> %c %lld %lld pid %d t=%lld\n", start, len, fl.l_type == F_RDLCK ? 'r' : 'w',
			       (long long)fl.l_start, (long long)fl.l_len, (int)fl.l_pid, now_ms());
		}
	}
	return rc;
}
