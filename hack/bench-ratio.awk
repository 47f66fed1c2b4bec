# Summarises `go test -bench` output of internal/kclworker: mean ns/op per benchmark, and the
# ratio of a render through a warm worker pool to the same render called in-process.
/^Benchmark/ {
	name = $1; sub(/-[0-9]+$/, "", name)
	sum[name] += $3; n[name]++
}
END {
	inproc = sum["BenchmarkRenderInProcess"] / n["BenchmarkRenderInProcess"]
	warm = sum["BenchmarkRenderWarmPool"] / n["BenchmarkRenderWarmPool"]
	cold = sum["BenchmarkRenderColdWorker"] / n["BenchmarkRenderColdWorker"]
	printf "render of 51 objects, mean of %d runs each:\n", n["BenchmarkRenderInProcess"]
	printf "  in-process call:  %8.2f ms\n", inproc / 1e6
	printf "  warm worker pool: %8.2f ms\n", warm / 1e6
	printf "  cold worker:      %8.2f ms (a new worker process per render)\n", cold / 1e6
	printf "  ratio warm pool / in-process: %.3f (target <= 1.2)\n", warm / inproc
	printf "  ratio cold worker / in-process: %.3f\n", cold / inproc
	if (warm / inproc > 1.2) { print "isolation overhead above target"; exit 1 }
}
