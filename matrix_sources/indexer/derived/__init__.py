"""What the system itself emitted: the artifact manifest, the derived filter that keeps such
text out of the evidence, reference corpora and the audits over both. Matching works on
normalised text; it never sends or renders a reply (appservice/bot/ does)."""
