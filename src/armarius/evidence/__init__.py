"""Evidence units: local, editable evidence documents kept as canonical files, reviewed and activated by humans."""
