package content

// OnDirStoreStep has step called at the named steps of the store's
// removals.
func OnDirStoreStep(s *DirStore, step func(string)) { s.step = step }
