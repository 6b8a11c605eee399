"""The manifest format in one place: its field table, the writer, the reader and every bound it is read within."""
