package mysql

import (
	"strings"
	"testing"
)

func TestTiDBIsRefusedByItsVersionString(t *testing.T) {
	for _, v := range []string{"8.0.11-TiDB-v7.5.0", "5.7.25-TiDB-v6.1.0", "8.0.11-tidb-v8.1.1-serverless"} {
		_, err := classify(v, 1, 1<<24)
		if err == nil {
			t.Fatalf("%s: opened a TiDB server, which ignores FOR UPDATE under SKIP LOCKED", v)
		}
		if !strings.Contains(err.Error(), "TiDB") || !strings.Contains(err.Error(), "SKIP LOCKED") {
			t.Fatalf("%s: the error does not say why: %v", v, err)
		}
	}
	for v, maria := range map[string]bool{"10.11.19-MariaDB-0+deb12u1": true, "8.0.36": false, "8.4.0-commercial": false} {
		d, err := classify(v, 2, 1<<24)
		if err != nil {
			t.Fatalf("%s: refused: %v", v, err)
		}
		if d.mariaDB != maria || d.step != 2 || d.packet != 1<<24 {
			t.Fatalf("%s: dialect %+v", v, d)
		}
	}
}
