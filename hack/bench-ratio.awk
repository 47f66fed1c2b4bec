# Summarises `go test -bench` output of internal/kclworker: mean ns/op per benchmark, and the
# ratio of a render through a warm worker pool to the same render called in-process.
# BenchmarkWarmWorkerMemory/<command> reports what a warm confined worker keeps after N renders of
# different programs: anon-MiB (RssAnon) and rss-MiB (VmRSS), printed as the mean of the runs.
/^Benchmark/ {
	name = $1; sub(/-[0-9]+$/, "", name)
	sum[name] += $3; n[name]++
	for (i = 4; i < NF; i++) {
		if ($(i+1) == "anon-MiB") { anon[name] += $i }
		if ($(i+1) == "rss-MiB") { rss[name] += $i; mem[name] = $2 }
	}
}
END {
	inproc = sum["BenchmarkRenderInProcess"] / n["BenchmarkRenderInProcess"]
	warm = sum["BenchmarkRenderWarmPool"] / n["BenchmarkRenderWarmPool"]
	cold = sum["BenchmarkRenderColdWorker"] / n["BenchmarkRenderColdWorker"]
	warmc = sum["BenchmarkRenderWarmConfined"] / n["BenchmarkRenderWarmConfined"]
	coldc = sum["BenchmarkRenderColdConfined"] / n["BenchmarkRenderColdConfined"]
	printf "render of 51 objects, mean of %d runs each:\n", n["BenchmarkRenderInProcess"]
	printf "  in-process call:  %8.2f ms\n", inproc / 1e6
	printf "  warm worker pool: %8.2f ms\n", warm / 1e6
	printf "  cold worker:      %8.2f ms (a new worker process per render)\n", cold / 1e6
	printf "  warm confined:    %8.2f ms (sandboxed worker of one namespace)\n", warmc / 1e6
	printf "  cold confined:    %8.2f ms (a new sandboxed worker per render)\n", coldc / 1e6
	printf "  ratio warm pool / in-process: %.3f (target <= 1.2)\n", warm / inproc
	printf "  ratio warm confined / in-process: %.3f (target <= 1.2)\n", warmc / inproc
	printf "  ratio cold worker / in-process: %.3f\n", cold / inproc
	printf "  ratio cold confined / in-process: %.3f\n", coldc / inproc
	for (name in mem) {
		short = name; sub(/^BenchmarkWarmWorkerMemory\//, "", short)
		printf "warm confined worker (%s) after %d different programs: RssAnon %.1f MiB, RSS %.1f MiB (mean of %d runs)\n",
			short, mem[name], anon[name] / n[name], rss[name] / n[name], n[name]
	}
	if (warm / inproc > 1.2 || warmc / inproc > 1.2) { print "isolation overhead above target"; exit 1 }
}
