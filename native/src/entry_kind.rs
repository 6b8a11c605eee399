//! The kinds of entry an artifact holds (`model.KINDS`), written once for the scan and the manifest parse.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    File,
    Dir,
    Symlink,
    Fifo,
    Char,
    Block,
}

impl Kind {
    pub const ALL: [Kind; 6] = [Kind::File, Kind::Dir, Kind::Symlink, Kind::Fifo, Kind::Char, Kind::Block];

    /// The name a manifest and `FileMeta.kind` use.
    pub fn name(self) -> &'static str {
        match self {
            Kind::File => "file",
            Kind::Dir => "dir",
            Kind::Symlink => "symlink",
            Kind::Fifo => "fifo",
            Kind::Char => "char",
            Kind::Block => "block",
        }
    }

    pub fn named(name: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|kind| kind.name() == name)
    }

    /// `model.kind_of`: `None` for a socket (or any type no artifact holds).
    pub fn of(mode: u32) -> Option<Kind> {
        match mode & libc::S_IFMT {
            libc::S_IFREG => Some(Kind::File),
            libc::S_IFDIR => Some(Kind::Dir),
            libc::S_IFLNK => Some(Kind::Symlink),
            libc::S_IFIFO => Some(Kind::Fifo),
            libc::S_IFCHR => Some(Kind::Char),
            libc::S_IFBLK => Some(Kind::Block),
            _ => None,
        }
    }

    /// `model.SPECIAL_KINDS`.
    pub fn special(self) -> bool {
        matches!(self, Kind::Fifo | Kind::Char | Kind::Block)
    }

    /// `model.LINKABLE_KINDS`: what a hard link may join within a tree.
    pub fn linkable(self) -> bool {
        self != Kind::Dir
    }
}
