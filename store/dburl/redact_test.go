package dburl_test

import (
	"errors"
	"fmt"
	"io/fs"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/store/dburl"
)

func TestRedactMasksOnlyThePassword(t *testing.T) {
	for raw, want := range map[string]string{
		// Valid URLs: user, host, port, database and parameters stay.
		"postgres://app:s3cret@db.example:5432/app?sslmode=disable": "postgres://app:xxxxx@db.example:5432/app?sslmode=disable",
		"postgresql://app:s3cret@[::1]:5432/app":                    "postgresql://app:xxxxx@[::1]:5432/app",
		"mysql://root:s3cret@127.0.0.1:3306/test":                   "mysql://root:xxxxx@127.0.0.1:3306/test",
		"postgres://app:s3cret@db/app?application_name=a@b":         "postgres://app:xxxxx@db/app?application_name=a@b",
		"postgres://app@db/app?password=s3cret&sslpassword=k3y":     "postgres://app@db/app?password=xxxxx&sslpassword=xxxxx",
		"postgres://app:@db/app":                                    "postgres://app:@db/app",
		// Nothing to mask.
		"mysql://root@127.0.0.1:3306/test": "mysql://root@127.0.0.1:3306/test",
		"sqlite:sluice.db":                 "sqlite:sluice.db",
		"/var/lib/app/jobs.db":             "/var/lib/app/jobs.db",
		"":                                 "",
		// Malformed: masked up to the last '@', whatever the password holds.
		"mysql://u:s3cret@host:notaport/db":  "mysql://u:xxxxx@host:notaport/db",
		"postgres://u:s3cret@[::1/db":        "postgres://u:xxxxx@[::1/db",
		"postgres://u:s3/cr?et#x@host/db":    "postgres://u:xxxxx@host/db",
		"mysql://u:s3c@r@t@host/db":          "mysql://u:xxxxx@host/db",
		"postgres:u:s3cret@host/db":          "postgres:u:xxxxx@host/db",
		"host=db user=app password=s3cret":   "host=db user=app password=xxxxx",
		"host=db password='s3 cret' user=ap": "host=db password=xxxxx user=ap",
	} {
		require.Equal(t, want, dburl.Redact(raw), raw)
	}
}

func TestRedactErrorMasksThePasswordAndKeepsTheChain(t *testing.T) {
	const raw = "postgres://app:s3cret-pw@db/app"
	err := fmt.Errorf("open %s: %w (password s3cret-pw)", raw, fs.ErrNotExist)
	red := dburl.RedactError(err, raw)
	require.Equal(t, "open postgres://app:xxxxx@db/app: file does not exist (password xxxxx)", red.Error())
	require.ErrorIs(t, red, fs.ErrNotExist)

	plain := errors.New("connection refused")
	require.Same(t, plain, dburl.RedactError(plain, raw), "nothing to mask: the same error")
	require.NoError(t, dburl.RedactError(nil, raw))
	// A short password is not looked for in free text: it would match words.
	require.Equal(t, "pw: no", dburl.RedactError(errors.New("pw: no"), "postgres://u:pw@h/d").Error())
}
