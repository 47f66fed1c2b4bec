package kclworker

// IdlePIDs lists the process IDs of idle workers, for tests that kill one from outside.
func (p *Pool) IdlePIDs() []int {
	p.mu.Lock()
	defer p.mu.Unlock()
	var pids []int
	for _, w := range p.idle {
		pids = append(pids, w.cmd.Process.Pid)
	}
	return pids
}
