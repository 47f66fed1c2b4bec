# The scale harness (test/bench): the real local Flux environment of the end-to-end tests
# (test/fluxenv) and bin/kcl-artifact-controller with its sandbox on; N KCLArtifacts (default
# 1000) over namespaces, timed through create, re-publish (a commit) and no-op reconciles, once
# with spec.kustomization.disabled and once with the generated Kustomizations applied by
# kustomize-controller. Prints one table (also in bin/bench-scale.md); takes a few minutes. Not
# part of `make test`. Included by the Makefile, which defines GO, BIN and the build and testbin
# targets.
#
#   make bench-scale BENCH_SCALE_FLAGS='--n 200 --namespaces 4 --controller-args "--kcl-workers=4"'
#   flags: --n --namespaces --passes disabled,enabled --controller-args --timeout --keep --workdir
#   make bench-scale-compare: plain Flux against KCLArtifacts, same objects (--compare), in two
#     shapes in one run: per-app (a Kustomization or a KCLArtifact per application) and grouped (one
#     per namespace, for all its applications); --shapes per-app or --shapes grouped runs one.
#     Phases: create, a commit changing every application, commits changing 1 and 10 of them (the
#     sparse commits), and a requested no-op. Prints
#     the table of docs/benchmarks.md, a group of columns per shape (bin/bench-scale-compare.md).
#     Full run (1,000 over 10 namespaces) about 22 minutes; check at small scale with
#     BENCH_SCALE_FLAGS='--n 100 --namespaces 2'
#   make bench-scale-faults: recovery from faults at N KCLArtifacts (--faults)
#   make bench-noisy: victims' spec changes timed alone and beside an attacker namespace (--noisy, --victims,
#     --attack-namespaces 1,2,5 for the same attacks spread over several namespaces of one tenant)

BENCH_SCALE_FLAGS ?=

.PHONY: bench-scale bench-scale-compare bench-scale-faults bench-noisy

## bench-scale: scale harness: N KCLArtifacts through create, re-publish and no-op on the real local Flux environment (bin/bench-scale.md)
bench-scale: build testbin
	set -a && . $(BIN)/testbin.env && set +a && KCL_LIB=$(BIN)/libkcl.so KCL_BINARY=$(BIN)/kcl-artifact-controller \
		$(GO) run ./test/bench $(BENCH_SCALE_FLAGS)

## bench-scale-compare: the same objects for N applications through plain Flux and through KCLArtifacts, per application and grouped per namespace, with ratios (bin/bench-scale-compare.md)
bench-scale-compare: build testbin
	set -a && . $(BIN)/testbin.env && set +a && KCL_LIB=$(BIN)/libkcl.so KCL_BINARY=$(BIN)/kcl-artifact-controller \
		$(GO) run ./test/bench --compare $(BENCH_SCALE_FLAGS)

## bench-scale-faults: N KCLArtifacts with generated Kustomizations through kills, wiped storage, killed workers and corrupted artifacts; recovery times (bin/bench-scale-faults.md)
bench-scale-faults: build testbin
	set -a && . $(BIN)/testbin.env && set +a && KCL_LIB=$(BIN)/libkcl.so KCL_BINARY=$(BIN)/kcl-artifact-controller \
		$(GO) run ./test/bench --faults $(BENCH_SCALE_FLAGS)

## bench-noisy: noisy neighbour: victims' latency alone and while one namespace runs slow dependencies, endless renders, big outputs and 1ms intervals; controller peak RSS (bin/bench-noisy.md)
bench-noisy: build testbin
	set -a && . $(BIN)/testbin.env && set +a && KCL_LIB=$(BIN)/libkcl.so KCL_BINARY=$(BIN)/kcl-artifact-controller \
		$(GO) run ./test/bench --noisy $(BENCH_SCALE_FLAGS)
