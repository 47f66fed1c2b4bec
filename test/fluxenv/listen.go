package fluxenv

import (
	"net"
	"os"
)

// listenLogged opens (appends to) the log file of a server and a listener on a free port of
// 127.0.0.1, closing the first when the second fails.
func listenLogged(logPath string) (net.Listener, *os.File, error) {
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		logFile.Close()
		return nil, nil, err
	}
	return ln, logFile, nil
}
