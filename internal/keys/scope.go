package keys

import "strings"

// Scope returns the first part of a rule's stored keys (a rate limit's
// budgets, a concurrency limit's slots, a coalescing rule's pending jobs):
// group, or kind when group is empty. It refuses, at registration, what
// would make a stored key ambiguous or unusable:
//
//   - a scope that is not a valid key (Check), or that holds "/" (see
//     CheckScope);
//   - a literal key declaration (a string, the same for every job) whose
//     stored form, Scoped(scope, literal), is not a valid key, so that
//     every enqueue of the kind would be refused.
//
// what names the stored key in the error ("rate-limit key"); the scope is
// named as the Group, or the kind.
func Scope(what, group, kind string, decl any) (string, error) {
	scope, name := group, "Group"
	if group == "" {
		scope, name = kind, "kind"
	}
	if err := CheckScope(name, scope); err != nil {
		return "", err
	}
	if literal, ok := decl.(string); ok {
		if err := Check(what, Scoped(scope, literal)); err != nil {
			return "", err
		}
	}
	return scope, nil
}

// CheckScope refuses a scope that cannot start a stored key: one that is
// not a valid key (Check), or that holds "/". A key is stored as
// SCOPE/VALUE, so a "/" in the scope would let two scopes share keys:
// Group "sync/eu" with value "acct" and Group "sync" with value "eu/acct"
// would both be "sync/eu/acct". what names the scope in the error ("Group",
// "kind").
func CheckScope(what, scope string) error {
	if err := Check(what, scope); err != nil {
		return err
	}
	if strings.Contains(scope, "/") {
		return &Error{What: what, Preview: Preview(scope),
			Reason: `contains "/", which ends the scope in a stored key (SCOPE/KEY), so another scope's keys could be the same; name a Group without it`}
	}
	return nil
}
