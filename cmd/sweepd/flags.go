package main

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/sweep-k8s/sweep/cleanup"
	"github.com/sweep-k8s/sweep/internal/field"
	"github.com/sweep-k8s/sweep/internal/version"
)

// durationValue is a time.Duration flag whose parse error says what is
// wanted: pflag's own repeats time.ParseDuration's "missing unit". A
// positive one also refuses zero, which in the config structs means "the
// default": on a command line it is a mistake, not a way to ask for that.
type durationValue struct {
	p        *time.Duration
	positive bool
}

// durationVar registers a durationValue.
func durationVar(fs *pflag.FlagSet, p *time.Duration, name string, def time.Duration, usage string) {
	*p = def
	fs.Var(&durationValue{p: p}, name, usage)
}

// positiveDurationVar registers a durationValue that refuses zero and
// negative durations.
func positiveDurationVar(fs *pflag.FlagSet, p *time.Duration, name string, def time.Duration, usage string) {
	*p = def
	fs.Var(&durationValue{p: p, positive: true}, name, usage)
}

func (d *durationValue) Set(s string) error {
	v, err := time.ParseDuration(s)
	if err != nil {
		if _, nerr := strconv.ParseFloat(s, 64); nerr == nil {
			return fmt.Errorf("want a duration with a unit, such as %sm or %ss", s, s)
		}
		return errors.New("want a duration such as 15m, 30s or 1h30m")
	}
	if d.positive && v <= 0 {
		return errors.New("must be positive")
	}
	*d.p = v
	return nil
}

func (d *durationValue) Type() string   { return "duration" }
func (d *durationValue) String() string { return d.p.String() }

// secondsValue is a duration given in whole seconds, for the flags whose
// names and units spectro-cleanup's manifests (and our chart's first
// versions) already spell; min is the least number taken, 0 or 1.
type secondsValue struct {
	p   *time.Duration
	min int
}

// secondsVar registers a secondsValue.
func secondsVar(fs *pflag.FlagSet, p *time.Duration, name string, def, min int, usage string) {
	*p = time.Duration(def) * time.Second
	fs.Var(secondsValue{p: p, min: min}, name, usage)
}

func (s secondsValue) Set(v string) error {
	n, err := strconv.Atoi(v)
	if err != nil || n < s.min {
		if s.min > 0 {
			return errors.New("want a positive number of whole seconds, such as 300")
		}
		return errors.New("want a number of whole seconds, 0 or more, such as 300")
	}
	*s.p = time.Duration(n) * time.Second
	return nil
}

func (s secondsValue) Type() string   { return "int" }
func (s secondsValue) String() string { return strconv.Itoa(int(*s.p / time.Second)) }

// portValue is a TCP port number.
type portValue struct{ p *int }

func (v portValue) Set(s string) error {
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 || n > 65535 {
		return errors.New("want a port number from 0 to 65535")
	}
	*v.p = n
	return nil
}

func (v portValue) Type() string   { return "int" }
func (v portValue) String() string { return strconv.Itoa(*v.p) }

// nameValue is a string flag that names an object or a directory, and
// refuses an empty value: `--sa-name=$SA` with SA unset must not pass for
// "no ServiceAccount", nor an empty namespace for "every namespace". Left
// out, the flag keeps its default.
type nameValue struct{ p *string }

// nameVar registers a nameValue.
func nameVar(fs *pflag.FlagSet, p *string, name, def, usage string) {
	*p = def
	fs.Var(nameValue{p: p}, name, usage)
}

// nameVarP registers a nameValue with a shorthand.
func nameVarP(fs *pflag.FlagSet, p *string, name, shorthand, def, usage string) {
	*p = def
	fs.VarP(nameValue{p: p}, name, shorthand, usage)
}

func (n nameValue) Set(v string) error {
	if strings.TrimSpace(v) == "" {
		return errors.New("empty: give a name, or leave the flag out")
	}
	*n.p = v
	return nil
}

func (n nameValue) Type() string   { return "string" }
func (n nameValue) String() string { return *n.p }

// levelValue is --log-level: what slog parses (debug, info, warn, error,
// with offsets such as debug-4), refused in words that name the levels.
type levelValue struct{ p *string }

func (l levelValue) Set(v string) error {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(v)); err != nil {
		return errors.New("want debug, info, warn or error")
	}
	*l.p = v
	return nil
}

func (l levelValue) Type() string   { return "string" }
func (l levelValue) String() string { return *l.p }

// choiceValue is a string flag that takes one of a few words.
type choiceValue struct {
	p       *string
	choices []string
}

func (c choiceValue) Set(v string) error {
	for _, ch := range c.choices {
		if v == ch {
			*c.p = v
			return nil
		}
	}
	return fmt.Errorf("want %s", orList(c.choices))
}

func (c choiceValue) Type() string   { return "string" }
func (c choiceValue) String() string { return *c.p }

// orList is "a, b or c".
func orList(words []string) string {
	if len(words) < 2 {
		return strings.Join(words, "")
	}
	return strings.Join(words[:len(words)-1], ", ") + " or " + words[len(words)-1]
}

// Annotations that put a command's flags under titled sections of its
// --help, as kube-apiserver's named flag sets do.
const (
	groupAnnotation  = "sweepd/group"  // on a flag: its section's title
	groupsAnnotation = "sweepd/groups" // on a command: the titles, in order, one a line
)

// addFlagGroup adds the flags of fs to cmd under a section titled title
// in cmd's --help.
func addFlagGroup(cmd *cobra.Command, title string, fs *pflag.FlagSet) {
	fs.VisitAll(func(f *pflag.Flag) { _ = fs.SetAnnotation(f.Name, groupAnnotation, []string{title}) })
	cmd.Flags().AddFlagSet(fs)
	if cmd.Annotations == nil {
		cmd.Annotations = map[string]string{}
	}
	cmd.Annotations[groupsAnnotation] += title + "\n"
}

// newFlagSet returns an empty flag set for addFlagGroup.
func newFlagSet() *pflag.FlagSet { return pflag.NewFlagSet("", pflag.ContinueOnError) }

// kubeFlags are the Kubernetes access flags of the subcommands that talk to
// the API server.
type kubeFlags struct {
	kubeconfig string
	// home is the kubeconfig tried last; "" is ~/.kube/config. Tests set it.
	home string
}

func addKubeFlags(fs *pflag.FlagSet) *kubeFlags {
	k := &kubeFlags{}
	fs.StringVar(&k.kubeconfig, "kubeconfig", "", "path to a kubeconfig file; default $KUBECONFIG, else the in-cluster config, else ~/.kube/config")
	return k
}

// restConfig finds the client config as kubectl and controllers do:
// --kubeconfig, else $KUBECONFIG, else the in-cluster config, else
// ~/.kube/config. A source that is given and fails is the error; when none
// is there, the error names each one tried.
func (k *kubeFlags) restConfig() (*rest.Config, error) {
	cfg, err := k.load()
	if err != nil {
		return nil, fmt.Errorf("kubernetes client config: %w", err)
	}
	cfg.UserAgent = "sweepd/" + version.Version()
	return cfg, nil
}

func (k *kubeFlags) load() (*rest.Config, error) {
	if k.kubeconfig != "" {
		cfg, err := clientcmd.BuildConfigFromFlags("", k.kubeconfig)
		if clientcmd.IsEmptyConfig(err) {
			return nil, fmt.Errorf("--kubeconfig %s names no cluster (the file is empty, or has no current-context): "+
				"give --kubeconfig a kubeconfig with one, or leave it unset for $KUBECONFIG or the in-cluster config", k.kubeconfig)
		}
		return cfg, err
	}
	if env := os.Getenv(clientcmd.RecommendedConfigPathEnvVar); env != "" {
		rules := &clientcmd.ClientConfigLoadingRules{Precedence: filepath.SplitList(env)}
		cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
		if clientcmd.IsEmptyConfig(err) {
			// client-go skips the files of $KUBECONFIG that do not exist.
			return nil, fmt.Errorf("$KUBECONFIG %s names no cluster (its files are missing or empty, or have no current-context): "+
				"set $KUBECONFIG or --kubeconfig to a kubeconfig with one, or unset it for the in-cluster config", env)
		}
		if err != nil {
			return nil, fmt.Errorf("$KUBECONFIG %s: %w", env, err)
		}
		return cfg, nil
	}
	cfg, inClusterErr := rest.InClusterConfig()
	if inClusterErr == nil {
		return cfg, nil
	}
	home := k.home
	if home == "" {
		home = clientcmd.RecommendedHomeFile
	}
	if _, err := os.Stat(home); err != nil {
		return nil, fmt.Errorf("no kubeconfig found: tried --kubeconfig (not set), $KUBECONFIG (not set), the in-cluster config (%w), %s (%w)",
			inClusterErr, home, errors.Unwrap(err))
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", home)
	if clientcmd.IsEmptyConfig(err) {
		return nil, fmt.Errorf("%s names no cluster (the file is empty, or has no current-context), and there is no in-cluster config: "+
			"set --kubeconfig or $KUBECONFIG to a kubeconfig with one, or run sweepd in a pod", home)
	}
	return cfg, err
}

// addSelfFlags registers --self-gvr, --self-name and --self-namespace: the
// workload that deletes itself last (cleanup, daemon). of names it in the
// help; the namespace defaults to $POD_NAMESPACE when nsFromEnv.
func addSelfFlags(fs *pflag.FlagSet, gvr *string, s *cleanup.Self, defGVR, of, gvrNote, nameEffect string, nsFromEnv bool) {
	nameVar(fs, gvr, "self-gvr", defGVR, "group/version/resource of "+of+gvrNote)
	nameVar(fs, &s.Name, "self-name", "", "name of "+of+"; "+nameEffect)
	nsDefault, nsHelp := "", "namespace of "+of
	if nsFromEnv {
		nsDefault, nsHelp = os.Getenv("POD_NAMESPACE"), nsHelp+"; default $POD_NAMESPACE"
	}
	nameVar(fs, &s.Namespace, "self-namespace", nsDefault, nsHelp)
}

// addRBACFlags registers the names of a workload's RBAC objects, which
// cleanup, daemon and uninstall take alike: of names the workload in the
// help, def holds the defaults, and waitOnly says that the command only
// waits until they are gone (uninstall) rather than deleting them.
func addRBACFlags(fs *pflag.FlagSet, s *cleanup.Self, def cleanup.Self, of string, waitOnly bool) {
	help := func(kind, fate string) string {
		if waitOnly {
			return kind + " of " + of + "; success waits until it is gone too"
		}
		return kind + " of " + of + ", " + fate
	}
	nameVar(fs, &s.ServiceAccount, "sa-name", def.ServiceAccount, help("ServiceAccount", "garbage-collected after it unless shared"))
	nameVar(fs, &s.Role, "role-name", def.Role, help("Role", "garbage-collected after it unless shared"))
	nameVar(fs, &s.RoleBinding, "role-binding-name", def.RoleBinding, help("RoleBinding", "garbage-collected after it unless shared"))
	nameVar(fs, &s.ClusterRole, "cluster-role-name", def.ClusterRole, help("ClusterRole", "deleted with it unless it is shared or built in"))
	nameVar(fs, &s.ClusterRoleBinding, "cluster-role-binding-name", def.ClusterRoleBinding, help("ClusterRoleBinding", "deleted with its ClusterRole"))
}

// namedFlag rewrites a configuration's *field.Error as "--flag: cause",
// naming the flag behind the field, so that the message speaks the command
// line's language; flags maps a command's fields to its flags. Other
// errors are returned as they are.
func namedFlag(err error, flags map[string]string) error {
	var fe *field.Error
	if errors.As(err, &fe) {
		if name := flags[fe.Field]; name != "" {
			return fmt.Errorf("--%s: %w", name, fe.Err)
		}
	}
	return err
}

// flagError is a Validate error as a usage error, in the flags' names.
func flagError(err error, flags map[string]string) error {
	return usageError{namedFlag(err, flags)}
}

// goFlagSpellings rewrites, for the cleanup command only, the spellings of
// Go's flag package that pflag does not take, so that every manifest
// written for spectro-cleanup (which parses with Go's flag) still runs:
// a single-dash long flag, -name or -name=value, becomes --name[=value].
// Everything else is left to pflag: it already takes --name value,
// --name=value and a bare boolean --name.
func goFlagSpellings(root *cobra.Command, args []string) []string {
	cmd, _, err := root.Find(args)
	if err != nil || cmd.Name() != "cleanup" || !cmd.HasParent() {
		return args
	}
	start := 0
	for start < len(args) && args[start] != cmd.Name() {
		start++
	}
	cmd.InitDefaultHelpFlag() // -help is Go's too
	lookup := func(name string) *pflag.Flag {
		if f := cmd.Flags().Lookup(name); f != nil {
			return f
		}
		return root.PersistentFlags().Lookup(name)
	}
	out := append([]string(nil), args[:start+1]...)
	for i := start + 1; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			return append(out, args[i:]...)
		}
		if len(a) < 2 || a[0] != '-' {
			out = append(out, a)
			continue
		}
		dashes := 1
		if a[1] == '-' {
			dashes = 2
		}
		name, _, hasValue := strings.Cut(a[dashes:], "=")
		f := lookup(name)
		if f == nil {
			out = append(out, a) // pflag says what is wrong with it
			continue
		}
		if dashes == 1 && len(name) > 1 {
			a = "-" + a
		}
		out = append(out, a)
		// The next argument is this flag's value: not to be rewritten.
		if !hasValue && f.NoOptDefVal == "" && i+1 < len(args) {
			i++
			out = append(out, args[i])
		}
	}
	return out
}
