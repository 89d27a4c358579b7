//go:build cgo && linux

#include <signal.h>
#include <string.h>

/* Runs before the Go runtime starts (an ELF constructor; glibc gives it
 * the program's arguments): for the commands that take SIGHUP (a mount,
 * a feed server), SIGHUP is ignored from the first instruction, which the
 * Go runtime keeps (it leaves an inherited SIG_IGN of SIGHUP alone) until
 * hangup.Catch takes it (signal.Notify installs its handler then). Without
 * it, a SIGHUP in the process's first milliseconds, before Catch, ended it
 * by Go's default. The command is the first argument that is not a flag,
 * as ForCommand finds it. */
__attribute__((constructor)) static void ffcvfs_hangup_early(int argc, char **argv, char **envp) {
	int i;
	(void)envp;
	if (argv == NULL) {
		return;
	}
	for (i = 1; i < argc && argv[i] != NULL; i++) {
		if (argv[i][0] == '-') {
			continue;
		}
		if (strcmp(argv[i], "mount") == 0 || strcmp(argv[i], "serve") == 0) {
			signal(SIGHUP, SIG_IGN);
		}
		return;
	}
}
