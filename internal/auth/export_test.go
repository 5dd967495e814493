package auth

// Check looks at the JWKS file now and installs its keys if it changed.
func (v *Verifier) Check() {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.checkLocked(v.cfg.Now())
}
