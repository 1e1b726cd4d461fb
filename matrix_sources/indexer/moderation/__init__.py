"""What the moderators see of the bot: per room, what was asked, what was answered, what
got "nothing matches" (grouped by meaning) and the votes on the answers (report.py),
over the event log's feedback tables. Nothing here changes ranking."""
