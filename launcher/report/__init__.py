"""What people read: the terminal table, report.md, report.html and the plots."""
