package artifactstore

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"hash"
	"io"
	"os"
)

// memoryLimit is how much rendered content is held in memory before it goes to a file: most
// renders are kilobytes and cost no file at all, while a render near --kcl-max-output-size is
// never held whole in the controller.
const memoryLimit = 1 << 20

// Content collects the rendered objects of one artifact and their hash as they are written.
// Close removes what it spilled to disk. The file lives in the controller's temporary directory,
// outside the staging area that workers read.
type Content struct {
	mem  bytes.Buffer
	file *os.File
	size int64
	sum  hash.Hash
}

// NewContent returns an empty Content.
func NewContent() *Content { return &Content{sum: sha256.New()} }

func (c *Content) Write(p []byte) (int, error) {
	c.sum.Write(p)
	c.size += int64(len(p))
	if c.file == nil && c.mem.Len()+len(p) <= memoryLimit {
		return c.mem.Write(p)
	}
	if c.file == nil {
		f, err := os.CreateTemp("", "kclartifact-content-")
		if err != nil {
			return 0, err
		}
		c.file = f
		if _, err := c.file.Write(c.mem.Bytes()); err != nil {
			return 0, err
		}
		c.mem = bytes.Buffer{}
	}
	return c.file.Write(p)
}

// Size is the number of bytes written.
func (c *Content) Size() int64 { return c.size }

// hexSum is the SHA-256 of what was written, in hex.
func (c *Content) hexSum() string { return hex.EncodeToString(c.sum.Sum(nil)) }

// reader reads the content from its beginning.
func (c *Content) reader() (io.Reader, error) {
	if c.file == nil {
		return bytes.NewReader(c.mem.Bytes()), nil
	}
	if _, err := c.file.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	return c.file, nil
}

// Close releases the content.
func (c *Content) Close() error {
	if c.file == nil {
		return nil
	}
	c.file.Close()
	return os.Remove(c.file.Name())
}
