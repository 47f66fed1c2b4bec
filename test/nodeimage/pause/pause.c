/*
 * pause: the first process of a pod sandbox, in the spirit of Kubernetes' pause. It holds the
 * pod's namespaces open, reaps the zombies re-parented to it (it is PID 1 when the pod shares its
 * PID namespace) and exits 0 on SIGTERM or SIGINT. Built with `gcc -static -Os -s` (nodeimage.
 * BuildPause) so the image needs nothing else.
 */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void on_term(int sig) {
	(void)sig;
	/* write(2) and _exit(2): only async-signal-safe calls in a handler */
	static const char msg[] = "pause: shutting down\n";
	(void)!write(STDERR_FILENO, msg, sizeof msg - 1);
	_exit(0);
}

static void on_child(int sig) {
	(void)sig;
	while (waitpid(-1, NULL, WNOHANG) > 0) {
	}
}

int main(int argc, char **argv) {
	if (argc > 1 && strcmp(argv[1], "-v") == 0) {
		puts("pause (kcl-artifact-controller test/nodeimage)");
		return 0;
	}
	if (getpid() != 1) {
		fputs("pause: warning: not PID 1, zombies are reaped only of our own children\n", stderr);
	}
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	/* PID 1 ignores signals it has no handler for: without these the pod could not stop */
	sa.sa_handler = on_term;
	if (sigaction(SIGINT, &sa, NULL) < 0 || sigaction(SIGTERM, &sa, NULL) < 0) {
		return 1;
	}
	sa.sa_handler = on_child;
	sa.sa_flags = SA_NOCLDSTOP | SA_RESTART;
	if (sigaction(SIGCHLD, &sa, NULL) < 0) {
		return 2;
	}
	for (;;) {
		pause();
	}
}
