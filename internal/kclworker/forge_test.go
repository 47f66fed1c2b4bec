package kclworker

import (
	"bufio"
	"os"
)

// ForgingWorker is a stand-in for a compromised worker, which the sandbox makes impossible to
// build from a KCL program: it answers each request first with a frame that lacks the request's
// nonce, then with the real answer. It exists so the pool's protocol checks are tested on their
// own.
const ForgingWorker = "__forging-kcl-worker"

// ServeForgingWorker runs ForgingWorker when the process was started as one.
func ServeForgingWorker() {
	if len(os.Args) < 2 || os.Args[1] != ForgingWorker {
		return
	}
	ch := os.NewFile(3, "channel")
	in := bufio.NewReader(ch)
	for {
		f, err := readFrame(in)
		if err != nil {
			os.Exit(0)
		}
		req, err := decodeRequest(f)
		if err != nil {
			os.Exit(1)
		}
		var forged nonce
		_ = writeFrame(ch, encodeAnswer(forged, statusOK, []byte{})...)
		_ = writeFrame(ch, encodeAnswer(req.nonce, statusOK, []byte{})...)
	}
}
