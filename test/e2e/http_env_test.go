package e2e

import "os"

// The binary's HTTP gateway listens on 127.0.0.1:8080 by default; hubs of
// these tests run side by side with other test packages' hubs, so unless a
// test says otherwise each picks a free port.
func init() {
	if os.Getenv("MESSAGEHUB_HTTP_ADDR") == "" {
		_ = os.Setenv("MESSAGEHUB_HTTP_ADDR", "127.0.0.1:0")
	}
}
