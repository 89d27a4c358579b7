package beton

// NamedTemps makes every FileDestination's temporary file a named one, as
// on a filesystem without O_TMPFILE.
func NamedTemps(on bool) { namedTemps = on }

// HostToken is this machine's token in temporary files' names.
func HostToken() string { return hostToken() }
