#!/usr/bin/env bash
# Fails (exit 1, printing each offending line) when a document a reader sees cites an issue
# number, or a decision record that does not exist:
#
# - README.md, ARCHITECTURE.md, docs/**/*.md, and the `//!` / `///` doc comments of
#   crates/*/src/**/*.rs;
# - an issue number is `#<digits>` not preceded by a letter, `&` (an HTML entity) or `PKCS`
#   (PKCS#8), or `issue <digits>` / `issue #<digits>` in any case;
# - an `ADR <n>` must name a record docs/decisions/<n, four digits>-*.md.
#
# Run from anywhere: bash scripts/check-docs.sh
set -euo pipefail
cd "$(dirname "$0")/.."

files=()
for f in README.md ARCHITECTURE.md; do
    [[ -f $f ]] && files+=("$f")
done
while IFS= read -r -d '' f; do files+=("$f"); done < <(find docs -name '*.md' -print0 | sort -z)
while IFS= read -r -d '' f; do files+=("$f"); done < <(find crates -path '*/src/*' -name '*.rs' -print0 | sort -z)

perl -e '
    use strict; use warnings;
    my $bad = 0;
    for my $file (@ARGV) {
        open(my $fh, "<", $file) or die "$file: $!";
        my $rust = $file =~ /\.rs$/;
        while (my $line = <$fh>) {
            chomp $line;
            next if $rust && $line !~ m{^\s*//[/!]};
            my @why;
            push @why, "issue number"
                if $line =~ /(?<![A-Za-z&])(?<!PKCS)#[0-9]+(?![0-9A-Za-z_])/
                || $line =~ /\bissues?\s+#?[0-9]+/i;
            while ($line =~ /\bADRs?\s*#?0*([0-9]+)/g) {
                my $record = sprintf("docs/decisions/%04d-", $1);
                push @why, "ADR $1 has no record under docs/decisions/"
                    unless glob("$record*.md");
            }
            if (@why) {
                print "$file:$.: ", join("; ", @why), ": $line\n";
                $bad = 1;
            }
        }
        close($fh);
    }
    exit $bad;
' "${files[@]}" && status=0 || status=$?

if [[ $status -ne 0 ]]; then
    echo "check-docs: cite what a round was about, never its issue number; cite a decision by its record under docs/decisions/" >&2
    exit 1
fi
echo "check-docs: no issue numbers, every ADR cited has a record"
