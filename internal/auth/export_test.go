package auth

import "os"

// Check looks at the JWKS file now and installs its keys if it changed.
func (v *Verifier) Check() {
	v.mu.Lock()
	defer v.mu.Unlock()
	data, err := os.ReadFile(v.cfg.JWKSFile)
	v.checkLocked(v.cfg.Now(), data, err)
}
