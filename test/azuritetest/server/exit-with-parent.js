// Loaded with `node --require ./exit-with-parent.js ...` by the Go harness (test/azuritetest):
// the harness keeps node's stdin open as a pipe, so when the test binary exits or is killed
// the pipe closes and Azurite exits with it instead of lingering.
"use strict";
if (!process.stdin.isTTY) {
  process.stdin.on("end", () => process.exit(0));
  process.stdin.on("error", () => process.exit(0));
  process.stdin.resume();
}
