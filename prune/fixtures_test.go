package prune

// The real multus cache files of testdata/multus-real (see its README),
// by their sandboxes and pod, as the tests of this package name them; the
// format's own tests (package cachefile) read the same files.
const (
	liveSandbox  = "2a9cc5e4f8b450e601bf2382e1b1e3d1f3c75dcc540ed467d27ac4be55130087"
	failedAdd    = "35d99114712fc62a00da4549ce5c4120d05c3a36df1eb7ad02e309dfaf08c86f"
	liveUID      = "f9bbbd0b-c09c-4ead-9c55-ba7d72b84b49"
	thickSandbox = "0539c85548a7b33981de5478dcea6d97314fba4ed2c4a8afbba54271465a0fce"
)
